# rdma-chain — build, test, lint, demo. Every target does its own set-up.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.buildVersion=$(VERSION)
TOOLS := $(CURDIR)/.tools
# The node image make image builds; conf/daemonset.yaml names IMAGE:IMAGE_TAG.
IMAGE ?= localhost/rdma-chain
IMAGE_TAG ?= dev
# Every binary and every test binary but -race's is built one way, the way
# the shipped binaries are (static, source paths trimmed), so that their
# dependencies compile once for all of them; the tiers' own go builds do the
# same (without -buildvcs=false, which changes no dependency's compile).
# Tests find the checkout from their folder (testenv.RepoRoot).
# -buildvcs=false: no VCS facts in the binaries, so a build from a clone and
# one from `git archive` (scripts/release-image.sh) are the same bytes.
GO_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false
GO_TEST = CGO_ENABLED=0 $(GO) test -trimpath
export RDMA_CHAIN_BIN := $(CURDIR)/bin/rdma-chain
export RDMA_CHAIN_TOOLS := $(TOOLS)

.PHONY: all build image push deps deps-lint deps-vm test test-setup test-unit test-fuzz test-netns test-alerts test-push test-containerd test-vm test-node test-vm-node test-cluster test-fleet soak lint demo demo-netns bench clean

all: build

build:
	$(GO_BUILD) -ldflags '$(LDFLAGS)' -o bin/rdma-chain ./plugins/meta/rdma-chain
	$(GO_BUILD) -ldflags '$(LDFLAGS)' -o bin/rdma-chain-smc-hook ./cmd/rdma-chain-smc-hook
	$(GO_BUILD) -ldflags '$(LDFLAGS)' -o bin/rdma-chain-ops ./cmd/rdma-chain-ops
	$(GO_BUILD) -ldflags '$(LDFLAGS)' -o bin/rdma-chain-dra ./cmd/rdma-chain-dra

# The node component's OCI image: an OCI image index of one image per
# IMAGE_ARCHES (Go cross-compiles; each image holds the four static
# binaries of its architecture at /, nothing else), as an OCI archive
# (index.json + blobs/ in a tar) that `ctr images import` loads and a
# registry push takes; tagged IMAGE_TAG and VERSION, labelled with the
# version and commit, reproducible (times from the commit). internal/mkimage
# is a module of its own: its registry library stays out of the product's.
IMAGE_ARCHES ?= amd64 arm64
IMAGE_BINARIES := rdma-chain rdma-chain-smc-hook rdma-chain-ops rdma-chain-dra
image: build
	@for a in $(IMAGE_ARCHES); do \
		for p in ./plugins/meta/rdma-chain ./cmd/rdma-chain-smc-hook ./cmd/rdma-chain-ops ./cmd/rdma-chain-dra; do \
			GOOS=linux GOARCH=$$a $(GO_BUILD) -ldflags '$(LDFLAGS)' -o bin/linux-$$a/ $$p || exit 1; \
		done; \
	done
	@CGO_ENABLED=0 $(GO) -C internal/mkimage run -trimpath . --out $(CURDIR)/bin/rdma-chain-image.tar --name $(IMAGE) --tag $(IMAGE_TAG) --tag $(VERSION) \
		--version $(VERSION) --revision $$(git rev-parse HEAD) --created $$(git log -1 --format=%cI) --entrypoint /rdma-chain-ops \
		$(foreach a,$(IMAGE_ARCHES),--platform linux/$(a)=$(CURDIR)/bin/linux-$(a)) $(IMAGE_BINARIES)

# Pushes the image index make image builds to REGISTRY (HOST/REPO[:TAG], the
# tag VERSION when it names none), keeping its digest, with the credentials
# of docker login (~/.docker/config.json), through internal/mkimage/push on
# go-containerregistry (no daemon, no skopeo). Prints REF@DIGEST.
# Without REGISTRY it stops before building anything.
$(if $(filter push,$(MAKECMDGOALS)),$(if $(REGISTRY),,$(error make push: give REGISTRY=HOST/REPO[:TAG])))
push: image
	@CGO_ENABLED=0 $(GO) -C internal/mkimage run -trimpath ./push --archive $(CURDIR)/bin/rdma-chain-image.tar \
		--ref-name $(IMAGE_TAG) --to $(REGISTRY) --default-tag $(VERSION)

# Each target installs only what it needs: deps has no linter, deps-lint adds it.
deps:
	DEPS_LINT=0 ./scripts/deps.sh

deps-lint:
	DEPS_LINT=1 ./scripts/deps.sh

deps-vm: deps
	./scripts/vm/prepare.sh

# Every tier but the node tier (make test-node), whose checks the cluster
# tier runs (docs/development.md says where each went). Under CI=true a
# tier that cannot run fails.
test: deps build test-setup test-unit test-alerts test-push test-fuzz test-netns test-containerd test-vm test-cluster
# The image make test builds for its tiers holds this machine's architecture
# only: no tier runs another, and make lint builds everything for arm64.
test: IMAGE_ARCHES = $(shell $(GO) env GOARCH)

# The README's set-up on a machine whose package lists are stale.
test-setup:
	./scripts/test-stale-lists.sh

# The hostile corpus runs the built binary ($RDMA_CHAIN_BIN): build first.
# The modules beside the product's (kustomize, the image builder) test too.
test-unit: build
	$(GO) test -race -count=1 ./...
	cd deploy && $(GO_TEST) -count=1 ./...
	cd internal/mkimage && $(GO_TEST) -count=1 ./...

# The alerting rules (deploy/monitoring): promtool (scripts/deps.sh builds
# it into .tools) checks the rules file and runs its unit tests, in which
# every alert fires and resolves. No promtool fails the target.
test-alerts:
	DEPS_LINT=0 DEPS_PROMTOOL=1 ./scripts/deps.sh
	$(TOOLS)/bin/promtool check rules deploy/monitoring/rdma-chain.rules.yaml
	cd deploy/monitoring && $(TOOLS)/bin/promtool test rules rdma-chain.rules.test.yaml

# make push as docs/install.md gives it, to distribution's registry (built
# by scripts/registry.sh from the Go module proxy) on the loopback; the
# index is read back and checked (both platforms, its digest, the binaries).
# It runs its own make push, which builds both of IMAGE_ARCHES' defaults.
test-push:
	./scripts/registry.sh >/dev/null
	cd internal/mkimage && $(GO_TEST) -tags push -count=1 -timeout 60m -v ./push/

# Every Fuzz target of the module, each for FUZZTIME (default 20000x, 20,000
# executions; FUZZTIME=5m make test-fuzz fuzzes for five minutes each),
# from its checked-in seed corpus under testdata/fuzz/.
test-fuzz:
	./scripts/fuzz.sh

# Privileged tier: real netns, veth, macvlan, real reference plugins, cnitool.
# Its cases are gated at run time (testenv.Privileged): they skip unless
# RC_PRIVILEGED=1, and with it fail where the process is not root.
test-netns: deps build
	RC_PRIVILEGED=1 $(GO_TEST) -count=1 -p 1 ./pkg/... ./cmd/... ./integration/netns/... ./integration/hostile/...

# A real containerd (Debian's, with runc) runs the chain for CRI pod sandboxes.
test-containerd: deps build
	./scripts/containerd-deps.sh
	$(GO_TEST) -tags containerd -count=1 -timeout 25m -v ./integration/containerd/

# Real-kernel tier: Debian kernels with soft-RoCE and the simrdma test device
# under qemu (6.1, 6.12 and 7.3, docs/kernels.md), every kernel's boots in one
# queue, longest first, one per VM slot (internal/testonly/vmslot: one TCG
# guest per core); a boot may take minutes under TCG (crash-rdma ~100 s).
VM_TEST_ENV = RC_VM_PLUGIN=$(CURDIR)/bin/rdma-chain RC_VM_BOOT_TIMEOUT=$${RC_VM_BOOT_TIMEOUT:-480s}
test-vm: deps-vm build
	$(VM_TEST_ENV) $(GO_TEST) -tags vm -count=1 -timeout 60m -v ./integration/vm/

# Node tier: a Kubernetes node in a VM (Debian 6.12, or 6.1 with
# NODE_KERNEL=6.1; qemu TCG): kubelet
# v1.37 standalone, containerd 2.4.2 + runc, the Mellanox RDMA device plugin,
# rdma-chain by its DaemonSet's pod on make image's image, then the pod
# manifests of integration/node/pods (PODS=DIR: anyone's; shared/ and
# exclusive/ boot the node once in each RDMA netns mode, side by side in
# the VM slots), each checked against its annotation test.rdma-chain/expect.
test-node: deps-vm image
	./scripts/node/parts.sh >/dev/null
	RC_NODE_PODS=$(PODS) $(GO_TEST) -tags node -count=1 -timeout 60m -v ./integration/node/

# The VM and node tiers as one go test, as make test runs them: their boots
# share the VM slots, so neither leaves a core idle while the other runs.
# go test prints each tier's log whole when that tier ends; the node's
# consoles are in .cache/node/run/console-MODE.log meanwhile.
test-vm-node: deps-vm build image
	./scripts/node/parts.sh >/dev/null
	$(VM_TEST_ENV) RC_NODE_PODS=$(PODS) $(GO_TEST) -tags 'vm node' -count=1 -timeout 60m -v ./integration/vm/ ./integration/node/

# Cluster tier: a control plane on the host's loopback (etcd v3.7.3,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl v1.37.2
# from the Go module proxy, scripts/cluster/parts.sh), certificates, tokens
# and kubeconfigs made by the test; two node VMs joining it; rdma-chain
# installed as docs/install.md's quick start says: its image pushed with
# `make push` (this machine's architecture; it leaves bin/rdma-chain-image.tar
# of that one) to distribution's registry on the loopback
# (scripts/registry.sh), which the nodes pull from, then
# `kubectl apply -k`. PODS=DIR runs anyone's manifests there instead of the
# tier's scenarios (docs/install.md).
test-cluster: deps-vm build
	./scripts/cluster/parts.sh >/dev/null
	./scripts/registry.sh >/dev/null
	RC_CLUSTER_PODS=$(if $(PODS),$(abspath $(PODS))) $(GO_TEST) -tags cluster -count=1 -timeout 60m -skip '^TestFleet$$' -v ./integration/cluster/

# The fleet: the DRA driver's publishing and claim status code for
# FLEET_NODES simulated nodes (a fake inventory each, their Leases renewed
# as kubelet's) against a control plane of the cluster tier's, and the
# scheduler placing claims across them; one table of FLEET-FIGURE lines
# (docs/performance.md). Needs the tier's parts, neither root nor qemu; it
# waits while a qemu runs. Not in make test: it takes longer than its budget.
FLEET_NODES ?= 100,300,1000
test-fleet:
	./scripts/cluster/parts.sh >/dev/null
	FLEET_NODES=$(FLEET_NODES) $(GO_TEST) -tags cluster -count=1 -timeout 150m -run '^TestFleet$$' -v ./integration/cluster/

lint: deps-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags vm ./...
	$(GO) vet -tags containerd ./...
	$(GO) vet -tags failpoint ./...
	$(GO) vet -tags smchook ./...
	$(GO) vet -tags node ./...
	cd deploy && $(GO) vet ./...
	cd internal/mkimage && $(GO) vet ./... && $(GO) vet -tags push ./...
	$(GO) vet -tags cluster ./...
	GOOS=linux GOARCH=arm64 $(GO_BUILD) ./...
	$(TOOLS)/bin/golangci-lint run --config conf/golangci.yml ./...
	cd deploy && $(TOOLS)/bin/golangci-lint run --config ../conf/golangci.yml ./...
	cd internal/mkimage && $(TOOLS)/bin/golangci-lint run --config ../../conf/golangci.yml ./...
	./scripts/check-generated.sh
	./scripts/check-subjects.sh

# The bounded soak at full size in the VM (both kernels, shared and
# exclusive, SOAK_CYCLES pod cycles each, default 2000); make test runs its
# short form (50 cycles) with the rest of the VM tier.
soak: deps-vm build
	RC_VM_SCENARIOS=soak-shared,soak-exclusive RC_VM_APPEND="rc.soak=$${SOAK_CYCLES:-2000} $${RC_VM_APPEND:-}" \
		RC_VM_PLUGIN=$(CURDIR)/bin/rdma-chain RC_VM_BOOT_TIMEOUT=$${RC_VM_BOOT_TIMEOUT:-10800s} \
		$(GO_TEST) -tags vm -count=1 -timeout 4h -v ./integration/vm/

# The main job on an embedded default: a Debian 6.12 kernel with soft-RoCE
# under qemu, two pods through cnitool, their IPv6, GIDs and an rping.
# It prepares only what it boots: the 6.12 kernel, no test module.
demo: deps build
	VM_KERNELS=6.12 VM_SIMRDMA=0 ./scripts/vm/prepare.sh
	RC_VM_PLUGIN=$(CURDIR)/bin/rdma-chain ./scripts/demo-vm.sh

# The same chain on this machine's kernel (no RDMA): pass-through and errors.
demo-netns: deps build
	./scripts/demo.sh

# Speed and memory against upstream tuning, host-device and macvlan, paired in
# one run (scripts/bench.sh; root); the table is written to .cache/bench.md.
bench: deps build
	./scripts/bench.sh

clean:
	rm -rf bin
