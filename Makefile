# leasehold — `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin
STORE     ?= sqlite:./leasehold.db
LISTEN    ?= 127.0.0.1:7411
BENCHCOUNT ?= 6
WITH_PG   := scripts/with-postgres.sh

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/leasehold
	$(GO) build -o $(BIN)/leasehold ./sidecar/cmd/leasehold

.PHONY: run
run: build ## Build and serve the API on 127.0.0.1:7411 with the embedded SQLite store
	$(BIN)/leasehold serve --listen $(LISTEN) --store $(STORE)

.PHONY: test
test: ## Run every test on both stores (starts a throwaway PostgreSQL when none is given)
	$(WITH_PG) $(GO) test -race -count=1 ./...

.PHONY: e2e
e2e: ## Run only the end-to-end tests (real processes, both stores)
	$(WITH_PG) $(GO) test -race -count=1 ./e2e/...

.PHONY: bench
bench: ## Run the benchmarks on both stores and summarise them with benchstat (bench.txt)
	$(WITH_PG) $(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./leasecore/... ./sidecar/... | tee bench.txt
	$(GO) tool benchstat bench.txt

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

.PHONY: generate
generate: ## Regenerate code from openapi.yaml
	$(GO) generate ./...

.PHONY: check-generated
check-generated: generate ## Fail when generated files differ from what is committed
	@if [[ -n "$$(git status --porcelain -- sidecar/api)" ]]; then git status --short -- sidecar/api; git diff -- sidecar/api | head -50; echo "generated code is stale: run make generate and commit"; exit 1; fi

.PHONY: clean
clean: ## Remove build output
	rm -rf $(BIN) bench.txt
