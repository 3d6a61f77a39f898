# leasehold — `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin
STORE     ?= sqlite:./leasehold.db
LISTEN    ?= 127.0.0.1:7411
BENCHCOUNT ?= 6
STREAMS   ?= 1000 10000
STREAM_DURATION ?= 60s
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
bench: bench-go bench-streams ## Run every benchmark: bench-go, then bench-streams

.PHONY: bench-go
bench-go: ## Go benchmarks on both stores, summarised with benchstat (bench.txt)
	$(WITH_PG) $(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./leasecore/... ./sidecar/... | tee bench.txt
	$(GO) tool benchstat bench.txt

.PHONY: bench-streams
bench-streams: build ## Hold STREAMS keepalive streams on one sidecar for STREAM_DURATION, both stores (bench-streams.txt)
	$(GO) build -o $(BIN)/streambench ./internal/streambench
	$(WITH_PG) bash -c 'set -e; for store in sqlite postgres; do for n in $(STREAMS); do \
	  $(BIN)/streambench -leasehold $(BIN)/leasehold -store $$store -streams $$n -duration $(STREAM_DURATION); \
	done; done' | tee bench-streams.txt
	$(GO) tool benchstat bench-streams.txt

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
	rm -rf $(BIN) bench.txt bench-streams.txt
