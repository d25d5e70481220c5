# nodesmith: `make run` starts the whole system on this machine; `make test`
# runs every test. Everything a target needs is installed by the target.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

MODULES := proto libs services/lifecycle services/api-gateway services/cloud-adapter services/hook-runner tools tools/kube cmd/nodesmithctl cmd/nodesmith-node-agent dev
SERVICES := api-gateway lifecycle cloud-adapter hook-runner

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned tool versions: regeneration and lint are reproducible.
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.1
GOLANGCI_LINT_VERSION      := v2.15.0
GRPCURL_VERSION            := v1.9.3

# Debian packages the tests run for real: OpenSSH's sshd (hook runner), Chromium (the
# gateway's status page), etcd (under the real kube-apiserver of tools/kube/kubetest).
TEST_PACKAGES := openssh-server chromium etcd-server

# The race detector is always on: a race is a bug whether or not a test
# happens to trip over it. testall runs every module even after one fails and
# ends with one summary; raw test2json events stay in .test/ for a closer look.
GOTEST_FLAGS ?= -count=1 -race -timeout 30m
TESTALL      := go run ./tools/cmd/testall

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: run
run: ## run the whole system embedded (NATS, 4 services, CVM emulator, simulated VMs and cluster); ARGS=--kube: a real kube-apiserver instead of the simulated cluster
	go run ./dev/cmd/nodesmith-dev $(ARGS)

.PHONY: nats-auth
nats-auth: ## regenerate deploy/kustomize/base/files/nats-authorization.conf (NATS users and permissions) from libs/natsauth
	cd libs && go run ./natsauth/cmd/nats-auth -out ../deploy/kustomize/base/files/nats-authorization.conf

.PHONY: build
build: ## build every service binary, nodesmithctl and the node agent (static) into ./bin
	@mkdir -p $(BIN)
	@for s in $(SERVICES); do (cd services/$$s && go build -o $(BIN)/$$s ./cmd/$$s); done
	cd dev && go build -o $(BIN)/nodesmith-dev ./cmd/nodesmith-dev
	cd cmd/nodesmithctl && CGO_ENABLED=0 go build -trimpath -o $(BIN)/nodesmithctl .
	cd cmd/nodesmith-node-agent && CGO_ENABLED=0 go build -trimpath -o $(BIN)/nodesmith-node-agent .

.PHONY: test
test: test-deps kube-apiserver verify ## run every test with the race detector (installs what the tests need); one summary at the end
	@$(TESTALL) -flags "$(GOTEST_FLAGS)" -events .test $(MODULES)

.PHONY: test-short
test-short: ## fast tests only (no sshd, no long scenarios, no race detector)
	@$(TESTALL) -flags "-short -count=1" $(MODULES)

.PHONY: verify
verify: ## formatting, vet, every module builds alone (GOWORK=off), generated code up to date
	@unformatted=$$(gofmt -l $(MODULES)); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && go vet ./... && GOWORK=off go build ./...); done
	$(MAKE) proto-check

.PHONY: test-deps
test-deps: ## install the Debian packages tests run for real
	@missing=""; for p in $(TEST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null; \
	fi

.PHONY: kube-apiserver
kube-apiserver: ## build the kube-apiserver the Kubernetes tests run (once per machine, into the user cache; ~5 min)
	@cd tools/kube && go run ./cmd/kube-apiserver-ensure

# Container images. Docker is not needed to check them: `make images` builds the
# same static binaries the Dockerfile builds and prints the docker commands.
IMAGE_REGISTRY ?= ghcr.io/nodesmith
IMAGE_TAG      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: images
images: ## static (CGO_ENABLED=0) service binaries into ./bin/images, checked static; prints the docker build/push commands
	@mkdir -p $(BIN)/images
	@for s in $(SERVICES); do \
	  (cd services/$$s && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o $(BIN)/images/$$s ./cmd/$$s); \
	  go version -m $(BIN)/images/$$s | grep 'CGO_ENABLED=0' >/dev/null || { echo "$$s: not built with CGO_ENABLED=0"; exit 1; }; \
	  if ldd $(BIN)/images/$$s >/dev/null 2>&1; then echo "$$s: dynamically linked (needs a libc the distroless/static image lacks)"; exit 1; fi; \
	  echo "bin/images/$$s: static"; \
	done
	@(cd cmd/nodesmith-node-agent && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o $(BIN)/images/node-agent .)
	@if ldd $(BIN)/images/node-agent >/dev/null 2>&1; then echo "node-agent: dynamically linked"; exit 1; fi; echo "bin/images/node-agent: static"
	@echo "# To build and push the images (from the repository root):"
	@for s in $(SERVICES); do \
	  echo "docker build --build-arg SERVICE=$$s -t $(IMAGE_REGISTRY)/$$s:$(IMAGE_TAG) . && docker push $(IMAGE_REGISTRY)/$$s:$(IMAGE_TAG)"; \
	done
	@echo "docker build -f cmd/nodesmith-node-agent/Dockerfile -t $(IMAGE_REGISTRY)/node-agent:$(IMAGE_TAG) . && docker push $(IMAGE_REGISTRY)/node-agent:$(IMAGE_TAG)"

.PHONY: lint
lint: $(BIN)/golangci-lint ## golangci-lint (v2) on every module, including the depguard layering rules; every module even after one fails
	@failed=""; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(BIN)/golangci-lint run --config $(CURDIR)/.golangci.yml ./...) || failed="$$failed $$m"; done; \
	if [ -n "$$failed" ]; then echo "lint failed in:$$failed"; exit 1; fi

.PHONY: proto
proto: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc ## regenerate Go from proto/ with pinned tools
	cd proto && $(BIN)/buf lint && $(BIN)/buf generate

.PHONY: monitoring
monitoring: ## regenerate the PrometheusRule (deploy/kustomize/components/monitoring) from deploy/prometheus/nodesmith-rules.yaml
	cd tools/kube && go test ./manifests -run TestPrometheusRuleIsGeneratedFromTheRulesFile -count=1 -update

.PHONY: proto-check
proto-check: proto ## fail if generated code differs from what is committed
	@git diff --exit-code -- proto/ || (echo "generated code is stale: run make proto and commit"; exit 1)

.PHONY: tools
tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/grpcurl ## install pinned dev tools into ./bin

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/golangci-lint:
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
$(BIN)/grpcurl:
	GOBIN=$(BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

.PHONY: secrets
secrets: ## generate this install's Secrets (sealing key ring, REST tokens, NATS NKeys) into deploy/kustomize/components/secrets/generated (git-ignored; never overwrites)
	cd tools/kube && go run ./cmd/installsecrets -dir $(CURDIR)/deploy/kustomize/components/secrets/generated

.PHONY: tidy
tidy: ## go mod tidy in every module
	@for m in $(MODULES); do (cd $$m && go mod tidy); done

.PHONY: clean
clean: ## remove build output and the embedded stack's data
	rm -rf $(BIN) .data

# Benchmarks and fault injection (issue #9); numbers of record go to docs/performance.md.
BENCH_ARGS    ?=
GOBENCH_COUNT ?= 6
CHAOS_ARGS    ?=
FUZZTIME      ?= 30s

.PHONY: bench
bench: ## benchmarks B1-B7 (table + bench/results.json; BENCH_ARGS="-quick" for a smoke run), then Go benchmarks (bench/gobench.txt, benchstat format)
	go run ./dev/bench -out $(CURDIR)/bench/results.json $(BENCH_ARGS)
	@pkgs=$$(grep -rl --include='*_test.go' '^func Benchmark' $(MODULES) | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	echo "go benchmarks in: $$pkgs"; \
	go test -run '^$$' -bench . -benchmem -count $(GOBENCH_COUNT) $$pkgs | tee $(CURDIR)/bench/gobench.txt

.PHONY: chaos
chaos: ## fault injection: separate processes, kills, NATS restart, cloud faults during scale-up/down; fails on a violated invariant
	go run ./dev/chaos $(CHAOS_ARGS)

.PHONY: fuzz
fuzz: ## run every Fuzz* target in the repo for FUZZTIME each (default 30s; make test runs their seed corpora)
	@targets=$$(go test -list '^Fuzz' $(addsuffix /...,$(addprefix ./,$(MODULES))) | awk '/^Fuzz/{f[n++]=$$1; next} /^ok/{for(i=0;i<n;i++) print $$2 "," f[i]; n=0}'); \
	if [ -z "$$targets" ]; then echo "no fuzz targets found"; exit 1; fi; \
	for t in $$targets; do \
	  pkg=$${t%,*}; name=$${t#*,}; \
	  echo "== $$name ($$pkg) for $(FUZZTIME)"; \
	  go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done
