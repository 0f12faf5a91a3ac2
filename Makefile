# rdma-chain — build, test, lint, demo. Every target does its own set-up.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.buildVersion=$(VERSION)
TOOLS := $(CURDIR)/.tools
export RDMA_CHAIN_BIN := $(CURDIR)/bin/rdma-chain
export RDMA_CHAIN_TOOLS := $(TOOLS)

.PHONY: all build deps deps-vm test test-unit test-netns test-vm lint demo bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/rdma-chain ./plugins/meta/rdma-chain

deps:
	./scripts/deps.sh

deps-vm: deps
	./scripts/vm/prepare.sh

# Every tier that exists. Under CI=true a tier that cannot run fails.
test: deps build test-unit test-netns test-vm

test-unit:
	$(GO) test -race -count=1 ./...

# Privileged tier: real netns, veth, macvlan, real reference plugins, cnitool.
test-netns: deps build
	$(GO) test -tags privileged -count=1 -p 1 ./pkg/... ./integration/netns/...

# Real-kernel tier: Debian kernels with soft-RoCE under qemu.
test-vm: deps-vm build
	RC_VM_PLUGIN=$(CURDIR)/bin/rdma-chain $(GO) test -tags vm -count=1 -timeout 20m -v ./integration/vm/

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags privileged ./...
	$(GO) vet -tags vm ./...
	$(TOOLS)/bin/golangci-lint run --config conf/golangci.yml ./...

demo: deps build
	./scripts/demo.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
