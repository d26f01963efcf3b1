# Continuum build, test and release plumbing. `make help` lists the targets.

GO                     ?= go
GOLANGCI_LINT_VERSION  := v2.15.0
GORELEASER_VERSION     := v2.15.1
HELM_VERSION           := v3.22.0
TOOLS                  := $(CURDIR)/.cache/bin
MODULE                 := github.com/continuum-router/continuum
VERSION                ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT                 ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS                := -s -w -X $(MODULE)/internal/cli.version=$(VERSION) -X $(MODULE)/internal/cli.commit=$(COMMIT)
FUZZTIME               ?= 30s

.PHONY: help build test test-kube lint bench fuzz completions man docs release-check tools clean demo top-e2e deploy-check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/continuum
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/continuum ./cmd/continuum

test: ## run every test with the race detector
	$(GO) test -race -shuffle=on ./...

# Packages with integration tests against a real kube-apiserver (build tag kube).
KUBE_TEST_PKGS          = $(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build kube' internal cmd scripts)))

test-kube: ## build kube-apiserver once (into the cache, see CACHE) and run the kube-tagged integration tests
	scripts/kube-apiserver/build.sh
	CONTINUUM_REQUIRE_KUBE=1 $(GO) test -race -tags kube -count=1 $(addprefix ./,$(KUBE_TEST_PKGS))

deploy-check: $(TOOLS)/helm ## render the Helm chart and Kustomize overlays (helm, kubectl) and check them
	$(TOOLS)/helm lint --strict scripts/deploy/helm/continuum --set dynamoPodDiscovery.enabled=true --set dynamoPodDiscovery.model=m
	$(TOOLS)/helm template continuum scripts/deploy/helm/continuum >/dev/null
	for d in scripts/deploy/kustomize/base scripts/deploy/kustomize/overlays/*/; do kubectl kustomize "$$d" >/dev/null || exit 1; done
	CONTINUUM_REQUIRE_DEPLOY_TOOLS=1 $(GO) test -count=1 -run 'Helm|Kustomize|Static' ./scripts/deploy/

lint: $(TOOLS)/golangci-lint ## gofmt, go vet and golangci-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags kube ./...
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

$(TOOLS)/helm:
	GOBIN=$(TOOLS) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(TOOLS)/goreleaser:
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)

clean: ## remove build output
	rm -rf bin dist
