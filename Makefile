# nodesmith: `make run` starts the whole system on this machine; `make test`
# runs every test. Everything a target needs is installed by the target.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

MODULES := proto libs services/lifecycle services/api-gateway services/cloud-adapter services/hook-runner tools dev
SERVICES := api-gateway lifecycle cloud-adapter hook-runner

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned tool versions: regeneration and lint are reproducible.
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.1
GOLANGCI_LINT_VERSION      := v2.15.0
GRPCURL_VERSION            := v1.9.3

# Debian packages the tests run for real (OpenSSH's sshd for the hook runner).
TEST_PACKAGES := openssh-server

GOTEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: run
run: ## run the whole system embedded (NATS, 4 services, CVM emulator, simulated VMs and cluster)
	go run ./dev/cmd/nodesmith-dev $(ARGS)

.PHONY: build
build: ## build every service binary into ./bin
	@mkdir -p $(BIN)
	@for s in $(SERVICES); do (cd services/$$s && go build -o $(BIN)/$$s ./cmd/$$s); done
	cd dev && go build -o $(BIN)/nodesmith-dev ./cmd/nodesmith-dev

.PHONY: test
test: test-deps verify ## run every test (installs what the tests need)
	@for m in $(MODULES); do echo "== $$m"; (cd $$m && go test $(GOTEST_FLAGS) ./...); done

.PHONY: test-short
test-short: ## fast tests only (no sshd, no long scenarios)
	@for m in $(MODULES); do (cd $$m && go test -short -count=1 ./...); done

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

.PHONY: lint
lint: $(BIN)/golangci-lint ## golangci-lint (v2) on every module
	@for m in $(MODULES); do echo "== $$m"; (cd $$m && $(BIN)/golangci-lint run --config $(CURDIR)/.golangci.yml ./...); done

.PHONY: proto
proto: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc ## regenerate Go from proto/ with pinned tools
	cd proto && $(BIN)/buf lint && $(BIN)/buf generate

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

.PHONY: tidy
tidy: ## go mod tidy in every module
	@for m in $(MODULES); do (cd $$m && go mod tidy); done

.PHONY: clean
clean: ## remove build output and the embedded stack's data
	rm -rf $(BIN) .data
