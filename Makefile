# weft's build. `make test` is what CI runs; it needs Go and, as root, installs what the
# privileged and end-to-end tiers need (CNI plugins from the tools module, iputils-ping,
# nftables). Tests that need root skip without it.

GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 10s
BIN      := bin
CNI_BIN  := .cache/cni/bin
KUBE_BIN := .cache/kube/bin
HELM_BIN := .cache/helm/bin
CONTAINERD_BIN := .cache/containerd/bin
# The Kubernetes programs e2e/kubecluster's cluster runs (kube-apiserver alone serves the
# Kubernetes-mode tests), built once from tools/kube's module and cached with a stamp.
KUBE_PROGRAMS := kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl kube-proxy.exe
IMAGE    ?= .cache/image/weft
IMAGE_ARCH ?= amd64
# The image's version (its tag and every binary's --version) and time, both from the
# checkout: the same commit (and Go release) gives the same image digest.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

export GOFLAGS := -buildvcs=false
# The build tags of weft's own programs: internal/buildinfo.Tags says why (not in GOFLAGS, so
# that the tools built from other projects' modules, flanneld among them, build as theirs do).
TAGS     := grpcnotrace

.PHONY: all build image test unit e2e cross wine lint bench fuzz demo deps conformance soak clean

all: build

## build: every package for Linux and Windows, and weftd and the weft CNI plugin into bin/
build:
	$(GO) build $(PKGS)
	GOOS=windows $(GO) build $(PKGS)
	$(GO) build -tags=$(TAGS) -o $(BIN)/weftd ./cmd/weftd
	$(GO) build -tags=$(TAGS) -o $(BIN)/weft ./cmd/weft
	$(GO) build -tags=$(TAGS) -o $(BIN)/weftctl ./cmd/weftctl

## image: the Linux image, an OCI image layout in $(IMAGE), built without a container engine
## (dist/image: weftd, weftctl and the weft CNI plugin, static, and nothing else). It prints the
## digest; push with crane or skopeo (README.md, "On Kubernetes"). IMAGE_ARCH=amd64,arm64 for more.
image:
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./dist/image/weft-image --out=$(IMAGE) \
	  --version=$(VERSION) --revision=$$(git rev-parse HEAD 2>/dev/null) --arch=$(IMAGE_ARCH)

## test: every test tier (unit, real etcd, privileged and e2e when root), plus the Windows build
test: deps lint cross unit wine

deps:
	$(GO) mod download
	tools/install-cni.sh $(CNI_BIN)
	tools/kube/install-kube.sh $(KUBE_BIN) $(KUBE_PROGRAMS) agnhost
	tools/kube/install-e2e.sh $(KUBE_BIN)
	tools/coredns/install-coredns.sh .cache/coredns/bin
	tools/containerd/install-containerd.sh $(CONTAINERD_BIN)
	tools/helm/install-helm.sh $(HELM_BIN)
	tools/flannel/install-flanneld.sh .cache/flannel/bin
	GOOS=windows tools/flannel/install-flanneld.sh .cache/flannel-windows
	@if [ "$$(id -u)" -eq 0 ]; then tools/install-e2e-deps.sh && tools/install-prometheus.sh && tools/flannel/install-deps.sh && tools/wine/setup.sh; fi

## unit: every package's tests, e2e/kubecluster's last and alone: its Kubernetes cluster and
## e2e suite take both cores for minutes, which starves the timing-sensitive tests of e2e (a
## lease storm that cannot be made, say) when the two packages run at once.
KUBECLUSTER_PKG := github.com/weftnet/weft/e2e/kubecluster
TEST_ENV = WEFT_CNI_BIN=$(CURDIR)/$(CNI_BIN) WEFT_KUBE_APISERVER=$(CURDIR)/$(KUBE_BIN)/kube-apiserver \
	  WEFT_HELM=$(CURDIR)/$(HELM_BIN)/helm
unit:
	@pkgs=$$($(GO) list $(PKGS)) && others=$$(echo "$$pkgs" | grep -vx '$(KUBECLUSTER_PKG)'); \
	set -e; \
	if [ -n "$$others" ]; then $(TEST_ENV) $(GO) test -race -count=1 -timeout 45m $$others; fi; \
	if echo "$$pkgs" | grep -qx '$(KUBECLUSTER_PKG)'; then $(TEST_ENV) $(GO) test -race -count=1 -timeout 45m $(KUBECLUSTER_PKG); fi

## e2e: only the end-to-end tests (root): weftd nodes in network namespaces, real pods and packets
e2e: deps
	WEFT_CNI_BIN=$(CURDIR)/$(CNI_BIN) WEFT_KUBE_APISERVER=$(CURDIR)/$(KUBE_BIN)/kube-apiserver $(GO) test -count=1 -timeout 10m -v ./e2e/...

## conformance: a Kubernetes cluster from real parts on this machine (root; issue 19): the
## control plane in the e2e underlay, nodes with their own containerd and kubelet in network and
## mount namespaces (e2e/kubecluster), a Windows node beside them (weftd.exe and kube-proxy.exe
## under Wine, e2e/winnode), every test of it, the long ones too. `make test` runs its
## core (TestPodNetwork: the cluster's own checks, then Kubernetes' e2e suite on SIG Network's
## conformance specs and a core of the NetworkPolicy ones). The long ones also need Helm and
## flanneld with flannel's CNI plugin for the migration; TestConformance runs the e2e suite's
## network specs for about an hour, each printed as it ends. All built once, cached.
conformance:
	tools/kube/install-kube.sh $(KUBE_BIN) $(KUBE_PROGRAMS) agnhost
	tools/kube/install-e2e.sh $(KUBE_BIN)
	tools/containerd/install-containerd.sh $(CONTAINERD_BIN)
	tools/coredns/install-coredns.sh .cache/coredns/bin
	tools/helm/install-helm.sh $(HELM_BIN)
	tools/flannel/install-flanneld.sh .cache/flannel/bin
	tools/flannel/install-flannel-kube.sh .cache/flannel/bin
	WEFT_KUBE_CLUSTER=1 WEFT_HELM=$(CURDIR)/$(HELM_BIN)/helm $(GO) test -count=1 -timeout 150m -v ./e2e/kubecluster/

## soak: the randomized fault soak (root; issue 22, e2e/soak): four weftd nodes on a three-member
## etcd, pods pinging across every pair, faults of seventeen kinds drawn from SEED (default: from
## the clock; printed, and the same seed replays the same schedule) and injected, overlapping,
## for DURATION in phases of three minutes, the invariants checked all along and after each
## phase. SOAK_BACKEND=host-gw for host-gw, SOAK_DUALSTACK=1 for a dual-stack network.
## SOAK_DATASTORE=kube: Kubernetes mode, weftd --kube-subnet-mgr on a kube-apiserver (built
## into $(KUBE_BIN) on first use) in the underlay, and its faults (the API server killed or
## frozen, Nodes churned, hostile and tampered annotations); `make soak DURATION=10m SEED=22
## SOAK_DATASTORE=kube` is its regression run. `make test` runs a 45 s etcd-mode one of seed 22
## (TestSoakShort).
DURATION ?= 30m
SEED     ?=
SOAK_BACKEND ?= vxlan
SOAK_DUALSTACK ?=
SOAK_DATASTORE ?= etcd
soak:
	tools/install-cni.sh $(CNI_BIN)
	tools/install-e2e-deps.sh
	if [ "$(SOAK_DATASTORE)" = kube ]; then tools/kube/install-kube.sh $(KUBE_BIN); fi
	WEFT_CNI_BIN=$(CURDIR)/$(CNI_BIN) WEFT_SOAK_DURATION=$(DURATION) WEFT_SOAK_SEED=$(SEED) WEFT_SOAK_BACKEND=$(SOAK_BACKEND) \
	  WEFT_SOAK_DUALSTACK=$(SOAK_DUALSTACK) WEFT_SOAK_DATASTORE=$(SOAK_DATASTORE) \
	  WEFT_KUBE_APISERVER=$(CURDIR)/$(KUBE_BIN)/kube-apiserver \
	  $(GO) test -count=1 -timeout 24h -v -run '^TestSoak$$' ./e2e/soak/

## cross: build, vet and compile the tests for Windows (tests cannot run here: no Windows)
cross:
	GOOS=windows $(GO) build $(PKGS)
	GOOS=windows $(GO) test -count=1 -exec=true -run='^$$' $(PKGS) >/dev/null

## wine: the Windows tests of ./windows/... and of the HNS simulator (internal/hnssim) run under Wine
## (wine64 and mingw installed as root on first use)
## As a plain user without Wine installed they cannot run: say so instead of failing.
wine:
	@if [ "$$(id -u)" -ne 0 ] && ! tools/wine/setup.sh 2>/dev/null; then \
	  echo "wine: Windows tests not run: wine64/mingw are missing and only root can install them"; \
	else \
	  tools/wine/setup.sh && GOOS=windows $(GO) test -count=1 -exec $(CURDIR)/tools/wine/exec.sh ./windows/... ./internal/hnssim/; \
	fi

## lint: formatting, the imports' groups (the standard library, then other modules, then weft's
## own: doc_test.go's TestImportGroups, over every module of the tree) and vet on both operating
## systems (tools/wincni, a Windows program, on Windows)
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) test -count=1 -run '^TestImport' .
	$(GO) vet $(PKGS)
	GOOS=windows $(GO) vet $(PKGS)
	cd tools/wincni && GOOS=windows $(GO) vet ./...

## bench: the Go benchmarks, with allocations; then, as root, the black-box benchmark of weftd
## beside flanneld (e2e/bench; a table of cold starts, RSS, event latency, bulk join, Kubernetes
## mode, pod-to-pod TCP throughput over VXLAN with its checksum offload on and off, and over WireGuard, about 9 minutes). make bench BENCHFLAGS=--quick is a short run; --only=weftd skips
## flanneld; weft-bench --help lists the rest. Kept out of `make test`. weftd is built as the image
## builds it (static, without symbol tables: 4 MiB less RSS than `make build`'s, with libc).
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)
	@if [ "$$(id -u)" -ne 0 ]; then echo "bench: weftd beside flanneld needs root (network namespaces): not run"; exit 0; fi; \
	set -e; \
	CGO_ENABLED=0 $(GO) build -tags=$(TAGS) -trimpath -ldflags="-s -w" -o $(BIN)/weftd-bench ./cmd/weftd; \
	$(GO) build -o $(BIN)/weft-bench ./e2e/bench; \
	tools/flannel/install-flanneld.sh .cache/flannel/bin; \
	tools/flannel/install-deps.sh; \
	tools/kube/install-kube.sh $(KUBE_BIN); \
	WEFT_KUBE_APISERVER=$(CURDIR)/$(KUBE_BIN)/kube-apiserver $(BIN)/weft-bench --weftd=$(BIN)/weftd-bench \
	  --flanneld=.cache/flannel/bin/flanneld --out=.cache/bench $(BENCHFLAGS)

## fuzz: run every fuzz target for FUZZTIME each (the seed corpora also run in `make test`)
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## demo: three weftd nodes with two pods each in network namespaces, and their pings (root).
## make demo DEMOFLAGS="--keep --backend=host-gw" keeps it running and says how to look around.
demo:
	$(GO) build -tags=$(TAGS) -o $(BIN)/weftd ./cmd/weftd
	$(GO) build -tags=$(TAGS) -o $(BIN)/weft ./cmd/weft
	$(GO) build -tags=$(TAGS) -o $(BIN)/weftctl ./cmd/weftctl
	$(GO) build -o $(BIN)/weft-demo ./e2e/demo
	tools/install-cni.sh $(CNI_BIN)
	tools/install-e2e-deps.sh
	$(BIN)/weft-demo --weftd=$(BIN)/weftd --cni-bin=$(CNI_BIN) $(DEMOFLAGS)

clean:
	rm -rf $(BIN)
