# syntax=docker/dockerfile:1
# One Dockerfile for every nodesmith service: SERVICE names it (api-gateway,
# lifecycle, cloud-adapter or hook-runner). Each image is one static binary
# on distroless (no shell, no libc), running as the nonroot user (65532).
# Build from the repository root, which holds the libs/ and proto/ modules
# the services require:
#
#   docker build --build-arg SERVICE=lifecycle -t ghcr.io/nodesmith/lifecycle:TAG .
#
# `make images` builds the same static binaries without docker and prints
# these commands. The build uses the service's own go.mod (GOWORK=off), as
# `make verify` does: a release never depends on the workspace's versions.
# Ports (documentation; the manifests declare them): every service serves
# /livez, /readyz and /metrics on 8087; the api-gateway also serves CA's
# gRPC API on 8086 and the REST admin API on 8080.

FROM golang:1.26 AS build
ARG SERVICE
RUN test -n "$SERVICE" || { echo "--build-arg SERVICE=<api-gateway|lifecycle|cloud-adapter|hook-runner> is required"; exit 1; }
WORKDIR /src
ENV CGO_ENABLED=0 GOWORK=off
# Module files first: dependencies are downloaded (into BuildKit's cache)
# only when a go.mod or go.sum changes, not on every source edit.
COPY libs/go.mod libs/go.sum libs/
COPY proto/go.mod proto/go.sum proto/
COPY services/${SERVICE}/go.mod services/${SERVICE}/go.sum services/${SERVICE}/
RUN --mount=type=cache,target=/go/pkg/mod \
    cd services/${SERVICE} && go mod download
COPY libs/ libs/
COPY proto/ proto/
COPY services/${SERVICE}/ services/${SERVICE}/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd services/${SERVICE} && \
    go build -trimpath -ldflags="-s -w" -o /out/service ./cmd/${SERVICE}

FROM gcr.io/distroless/static-debian12:nonroot
# The binary keeps one fixed path so the exec-form ENTRYPOINT needs no
# variable expansion (distroless has no shell to do it).
COPY --from=build /out/service /service
USER 65532:65532
ENTRYPOINT ["/service"]
