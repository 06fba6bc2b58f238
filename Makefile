# weft's build. `make test` is what CI runs; it needs nothing but Go (and, for the tiers that
# come with later issues, what `make deps` installs). Tests that need root skip without it.

GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 10s
BIN      := bin

export GOFLAGS := -buildvcs=false

.PHONY: all build test unit cross lint bench fuzz demo deps clean

all: build

## build: every package for Linux and Windows, and the commands into bin/
build:
	$(GO) build $(PKGS)
	GOOS=windows $(GO) build $(PKGS)

## test: every test tier (unit, real etcd, privileged when root), plus the Windows build
test: deps lint cross unit

deps:
	$(GO) mod download

unit:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## cross: build, vet and compile the tests for Windows (tests cannot run here: no Windows)
cross:
	GOOS=windows $(GO) build $(PKGS)
	GOOS=windows $(GO) vet $(PKGS)
	GOOS=windows $(GO) test -count=1 -exec=true -run='^$$' $(PKGS) >/dev/null

## lint: formatting and vet on both operating systems
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	GOOS=windows $(GO) vet $(PKGS)

## bench: the benchmarks, with allocations
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

## fuzz: run every fuzz target for FUZZTIME each (the seed corpora also run in `make test`)
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## demo: a cluster of weftd nodes in network namespaces (needs root)
demo:
	@echo "make demo: the three-node cluster in network namespaces arrives with weftd on Linux"
	@echo "(issue 3). Today weft is the foundation: run 'make test' to see the subnet manager"
	@echo "race 300 nodes for 256 subnets against a real etcd."

clean:
	rm -rf $(BIN)
