# Continuum build, test and release plumbing. `make help` lists the targets.

GO                     ?= go
GOLANGCI_LINT_VERSION  := v2.15.0
GORELEASER_VERSION     := v2.15.1
HELM_VERSION           := v3.22.0
KUSTOMIZE_VERSION      := v5.8.2
# Tools and builds that outlive the clone (the kube-apiserver, the npm
# tokenizer reference) live in CACHE, each named by its version, so a second
# run on the same machine, or another clone, reuses them. The tests find it
# through the same variable (internal/testutil.CacheDir).
CACHE                  := $(or $(CONTINUUM_CACHE),$(HOME)/.cache/continuum)
export CONTINUUM_CACHE := $(CACHE)
TOOLS                  := $(CACHE)/bin
GOLANGCI_LINT          := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
GORELEASER             := $(TOOLS)/goreleaser-$(GORELEASER_VERSION)
HELM                   := $(TOOLS)/helm-$(HELM_VERSION)
KUSTOMIZE              := $(TOOLS)/kustomize-$(KUSTOMIZE_VERSION)
# The deploy tests (scripts/deploy) render with these when they exist.
export CONTINUUM_HELM      := $(HELM)
export CONTINUUM_KUSTOMIZE := $(KUSTOMIZE)
MODULE                 := github.com/continuum-router/continuum
VERSION                ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT                 ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS                := -s -w -X $(MODULE)/internal/cli.version=$(VERSION) -X $(MODULE)/internal/cli.commit=$(COMMIT)
FUZZTIME               ?= 30s

.PHONY: help build test test-kube lint bench bench-cold bench-instr bench-proxy bench-perf faults soak fuzz completions man docs release-check tools clean demo top-e2e deploy-check tokenizer-ref

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/continuum
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/continuum ./cmd/continuum

test: ## run every test with the race detector
	$(GO) test -race -shuffle=on ./...

# Packages with integration tests against a real kube-apiserver (build tag kube).
# cmd/continuum's other tests (process-level, minutes long) have run in make
# test: there, only the kube tests run (their names end in Kube).
KUBE_TEST_PKGS          = $(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build kube' internal cmd scripts)))

test-kube: ## build kube-apiserver and kubectl once (into CACHE) and run the kube-tagged integration tests
	scripts/kube-apiserver/build.sh
	CONTINUUM_REQUIRE_KUBE=1 $(GO) test -race -tags kube -count=1 $(addprefix ./,$(filter-out cmd/continuum/,$(KUBE_TEST_PKGS)))
	CONTINUUM_REQUIRE_KUBE=1 $(GO) test -race -tags kube -count=1 -run 'Kube$$' ./cmd/continuum/

deploy-check: $(HELM) $(KUSTOMIZE) ## render the Helm chart and Kustomize overlays (pinned helm, kustomize) and check them
	$(HELM) lint --strict scripts/deploy/helm/continuum --set dynamoPodDiscovery.enabled=true --set dynamoPodDiscovery.model=m
	$(HELM) template continuum scripts/deploy/helm/continuum >/dev/null
	for d in scripts/deploy/kustomize/base scripts/deploy/kustomize/overlays/*/ scripts/deploy/kustomize/event-broker scripts/deploy/kustomize/kv-listener; do $(KUSTOMIZE) build "$$d" >/dev/null || exit 1; done
	CONTINUUM_REQUIRE_DEPLOY_TOOLS=1 $(GO) test -count=1 -run 'Helm|Kustomize|Static' ./scripts/deploy/

lint: $(GOLANGCI_LINT) ## gofmt, go vet and golangci-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags kube ./...
	$(GOLANGCI_LINT) run ./...

demo: ## run the router on its embedded demo fleet (127.0.0.1:8080)
	$(GO) run ./cmd/continuum serve --demo

top-e2e: ## drive `continuum top --demo` in tmux and check what it shows
	scripts/top-e2e.sh

# The proxy comparison measures the floor (a Go proxy that only relays bytes)
# too, so that the router's own cost shows apart from any Go proxy's.
BENCH_PROXY_FLAGS ?= -floor

# -p 1: one package's benchmarks at a time; two packages' at once would
# share the cores and time each other.
bench: tokenizer-ref ## run the benchmarks, then the proxy comparison (figures are ratios against baselines in the same run)
	CONTINUUM_REQUIRE_HF_REF=1 $(GO) test -p 1 -run '^$$' -bench . -benchmem ./...
	scripts/bench-proxy.sh $(BENCH_PROXY_FLAGS)

BENCH_COLD_BASE ?= HEAD
bench-cold: ## the router's own work per request, cold (BenchmarkCold), of the working tree against BENCH_COLD_BASE (default HEAD)
	scripts/bench-cold.sh $(BENCH_COLD_BASE)

BENCH_INSTR_BASE ?=
bench-instr: ## instructions, instruction cache misses and cold lines of code and data of a request on the floor's and the router's paths (cachegrind; steady under load), of the working tree and BENCH_INSTR_BASE when set
	scripts/bench-instr.sh $(BENCH_INSTR_BASE)

bench-proxy: ## continuum serve against nginx, the floor and the direct path, as processes under vegeta (installs nginx via apt if missing)
	scripts/bench-proxy.sh $(BENCH_PROXY_FLAGS)

BENCH_PERF_FLAGS ?= -rates 2000
bench-perf: ## where continuum's, nginx's and the floor's CPU goes under bench-proxy's load (perf record over one round; needs root or perf_event_paranoid -1)
	scripts/bench-perf.sh $(BENCH_PERF_FLAGS)

faults: build ## the fault-injection benchmark at full size (every scenario, about 4 minutes)
	bin/continuum bench --faults

SOAK_DURATION ?= 30m
soak: build ## the router over a churning simulated fleet for SOAK_DURATION (default 30m), under nice; not in CI
	nice bin/continuum bench --soak $(SOAK_DURATION)

tokenizer-ref: ## install the pinned npm tokenizer reference (tokenizers 0.23.2) into CACHE/tokenizer-ref
	scripts/tokenizer-ref/generate.sh --install

fuzz: ## run each fuzz target for FUZZTIME (failing inputs land in <pkg>/testdata/fuzz)
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

completions man docs: ## regenerate completions/ and man/ from the command tree
	rm -f man/*.1 completions/continuum.*
	$(GO) run ./scripts/gendocs .

release-check: $(GORELEASER) ## check goreleaser.yaml with the pinned goreleaser
	$(GORELEASER) check

tools: $(GOLANGCI_LINT) $(HELM) $(KUSTOMIZE) ## build the pinned golangci-lint, helm and kustomize into CACHE/bin

# go-install builds command $(1) (package@version $(2)) from the Go module
# proxy into a scratch GOBIN and renames it to $@, so that a build cut short
# leaves nothing that looks installed.
define go-install
	@mkdir -p $(TOOLS)
	rm -rf $@.tmp
	GOBIN=$@.tmp $(GO) install $(2)
	mv $@.tmp/$(1) $@
	rm -rf $@.tmp
endef

$(GOLANGCI_LINT):
	$(call go-install,golangci-lint,github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION))

$(HELM):
	$(call go-install,helm,helm.sh/helm/v3/cmd/helm@$(HELM_VERSION))

$(KUSTOMIZE):
	$(call go-install,kustomize,sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION))

$(GORELEASER):
	$(call go-install,goreleaser,github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION))

clean: ## remove build output
	rm -rf bin dist
