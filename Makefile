# Continuum build, test and release plumbing. `make help` lists the targets.

GO                     ?= go
GOLANGCI_LINT_VERSION  := v2.15.0
GORELEASER_VERSION     := v2.15.1
TOOLS                  := $(CURDIR)/.cache/bin
MODULE                 := github.com/continuum-router/continuum
VERSION                ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT                 ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS                := -s -w -X $(MODULE)/internal/cli.version=$(VERSION) -X $(MODULE)/internal/cli.commit=$(COMMIT)
FUZZTIME               ?= 30s

.PHONY: help build test lint bench fuzz completions man docs release-check tools clean demo top-e2e

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/continuum
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/continuum ./cmd/continuum

test: ## run every test with the race detector
	$(GO) test -race -shuffle=on ./...

lint: $(TOOLS)/golangci-lint ## gofmt, go vet and golangci-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/golangci-lint run ./...

demo: ## run the router on its embedded demo fleet (127.0.0.1:8080)
	$(GO) run ./cmd/continuum serve --demo

top-e2e: ## drive `continuum top --demo` in tmux and check what it shows
	scripts/top-e2e.sh

bench: ## run the benchmarks (figures are ratios against baselines in the same run)
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz: ## run each fuzz target for FUZZTIME and keep new corpus in testdata/fuzz
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

completions man docs: ## regenerate completions/ and man/ from the command tree
	rm -f man/*.1 completions/continuum.*
	$(GO) run ./scripts/gendocs .

release-check: $(TOOLS)/goreleaser ## check goreleaser.yaml with the pinned goreleaser
	$(TOOLS)/goreleaser check

tools: $(TOOLS)/golangci-lint ## install the pinned tools into .cache/bin

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(TOOLS)/goreleaser:
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)

clean: ## remove build output
	rm -rf bin dist
