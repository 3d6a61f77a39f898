# leasehold — `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin
# Every package of the workspace (go.work): the product's module (./...) and the modules of its
# tests, which ./... does not reach. internal/bench/httpbench/etcdload is built on its own.
PKGS      := ./... ./deploy/... ./e2e/... ./examples/...
STORE     ?= sqlite:./leasehold.db
LISTEN    ?= 127.0.0.1:7411
BENCHCOUNT ?= 6
STREAMS   ?= 1000 10000
STREAM_DURATION ?= 60s
WATCHERS  ?= 0 1 100 1000
WATCH_DURATION ?= 20s
WATCH_RATE ?= 100
FUZZTIME  ?= 30s
WITH_PG   := scripts/with-postgres.sh
# What leasehold version, /healthz and the provider say: from RELEASES and git
# (scripts/version.sh): the release's version at its recorded commit, else the next patch's
# pre-release (v0.1.1-dev.3+0123456789ab), or devel outside git. COMMIT is the full commit.
VERSION   ?= $(shell scripts/version.sh)
COMMIT    ?= $(shell scripts/version.sh --commit)
VERSION_PKG := github.com/leasehold/leasehold/internal/version
LDFLAGS   := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)
# The provider's version is the same without the leading v: Terraform's own form.
PROVIDER_LDFLAGS := -X main.version=$(patsubst v%,%,$(VERSION))
# The provider's version in a filesystem mirror (make mirror); Terraform needs a semver.
PROVIDER_VERSION ?= 0.1.0

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: build-leasehold ## Build bin/leasehold and bin/terraform-provider-leasehold
	$(GO) build -ldflags "$(PROVIDER_LDFLAGS)" -o $(BIN)/terraform-provider-leasehold ./cmd/terraform-provider-leasehold

.PHONY: build-leasehold
build-leasehold: ## Build bin/leasehold only (what run needs)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/leasehold ./cmd/leasehold

.PHONY: image
image: ## Build the container image leasehold:dev, stamped with VERSION
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t leasehold:dev .

.PHONY: compose-up
compose-up: ## docker compose up --build, the image stamped with VERSION
	LEASEHOLD_VERSION=$(VERSION) docker compose up --build

.PHONY: install
install: ## go install leasehold and terraform-provider-leasehold into GOBIN (default: GOPATH/bin), stamped with VERSION
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/leasehold
	$(GO) install -ldflags "$(PROVIDER_LDFLAGS)" ./cmd/terraform-provider-leasehold
	@dir="$$($(GO) env GOBIN)"; dir="$${dir:-$$($(GO) env GOPATH)/bin}"; \
	  echo "installed leasehold and terraform-provider-leasehold in $$dir"; \
	  case ":$$PATH:" in *":$$dir:"*) ;; *) echo "$$dir is not on PATH: add it (export PATH=\"$$dir:\$$PATH\")";; esac

.PHONY: mirror
mirror: ## Lay the provider out as a Terraform filesystem mirror in bin/mirror (docs/provider.md)
	$(GO) build -ldflags "-X main.version=$(PROVIDER_VERSION)" -o $(BIN)/terraform-provider-leasehold ./cmd/terraform-provider-leasehold
	@dir="$(BIN)/mirror/$$($(BIN)/terraform-provider-leasehold -address)/$(PROVIDER_VERSION)/$$($(GO) env GOOS)_$$($(GO) env GOARCH)"; \
	  mkdir -p "$$dir" && cp $(BIN)/terraform-provider-leasehold "$$dir/terraform-provider-leasehold_v$(PROVIDER_VERSION)" && \
	  echo "provider $(PROVIDER_VERSION) mirrored in $$(cd $(BIN)/mirror && pwd)"

.PHONY: dist
dist: ## Build a release into dist/: binaries for linux and darwin (amd64, arm64), provider zips and mirror, npm tarball, wheel, SBOMs, SHA256SUMS
	GO=$(GO) scripts/dist.sh $(VERSION) $(COMMIT) dist

.PHONY: run
run: build-leasehold ## Build and serve the API on 127.0.0.1:7411 with the embedded SQLite store
	$(BIN)/leasehold serve --listen $(LISTEN) --store $(STORE)

# -timeout: a package's own bound (go test's default is 10m), above what the slowest package
# (leasecore/storetest's mutants, e2e) takes on a loaded 2-core machine.
.PHONY: test
test: ## Run every test on both stores (starts a throwaway PostgreSQL when none is given)
	$(WITH_PG) $(GO) test -race -count=1 -timeout 25m $(PKGS)

.PHONY: e2e
e2e: ## Run only the end-to-end tests (real processes, both stores)
	$(WITH_PG) $(GO) test -race -count=1 ./e2e/...

.PHONY: screenshot
screenshot: ## Regenerate docs/console.png: the web console as its Chromium test (e2e TestConsole) leaves it
	LEASEHOLD_CONSOLE_SCREENSHOT=$(CURDIR)/docs/console.png $(GO) test -count=1 -run '^TestConsole$$' ./e2e/

.PHONY: fuzz
# go test fuzzes one target at a time: each Fuzz function found in a _test.go file runs in turn.
fuzz: ## Run every go test -fuzz target for FUZZTIME each (default 30s); their seeds run in make test
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
	  for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
	    echo "== $$name in $$(dirname "$$f") for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$(dirname "$$f")"; \
	  done; \
	done

# DURATION is how long each store's chaos load runs at least (make chaos DURATION=10m): a Go
# duration of h, m and s parts; it goes on, up to half as long again, until its grant target and
# every fault are met. The test timeout is twice DURATION plus 10 minutes (the stores run side by side).
DURATION  ?= 10m

.PHONY: chaos
chaos: ## Run only the chaos test, DURATION of load per store (default 10m); summary lines start with CHAOS
	@secs=$$(( $$(echo '$(DURATION)' | sed -E 's/([0-9]+)h/\1*3600+/; s/([0-9]+)m/\1*60+/; s/([0-9]+)s/\1+/; s/\+$$//') )) && \
	  echo "chaos: $(DURATION) of load per store, test timeout $$((2 * secs + 600))s" && \
	  LEASEHOLD_CHAOS_DURATION=$(DURATION) $(WITH_PG) $(GO) test -race -count=1 -v -timeout $$((2 * secs + 600))s -run '^TestChaos$$' ./e2e/

.PHONY: chaos-upgrade
chaos-upgrade: ## Run only the rolling upgrade under load (TestRollingUpgrade), DURATION per store (default 10m), its steps repeated; summary lines start with CHAOS and UPGRADE
	@secs=$$(( $$(echo '$(DURATION)' | sed -E 's/([0-9]+)h/\1*3600+/; s/([0-9]+)m/\1*60+/; s/([0-9]+)s/\1+/; s/\+$$//') )) && \
	  echo "chaos-upgrade: $(DURATION) of load per store, test timeout $$((2 * secs + 900))s" && \
	  LEASEHOLD_UPGRADE_DURATION=$(DURATION) $(WITH_PG) $(GO) test -race -count=1 -v -timeout $$((2 * secs + 900))s -run '^TestRollingUpgrade$$' ./e2e/

.PHONY: bench
bench: bench-go bench-streams bench-http ## Run every benchmark: bench-go, bench-streams, then bench-http

.PHONY: bench-go
bench-go: ## Go benchmarks on both stores, summarised with benchstat (bench.txt)
	$(WITH_PG) $(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./leasecore/... ./sidecar/... | tee bench.txt
	$(GO) tool benchstat bench.txt

.PHONY: bench-streams
bench-streams: build ## Hold STREAMS keepalive streams on one sidecar for STREAM_DURATION, both stores (bench-streams.txt)
	$(GO) build -o $(BIN)/streambench ./internal/bench/streambench
	$(WITH_PG) bash -c 'set -e; for store in sqlite postgres; do for n in $(STREAMS); do \
	  $(BIN)/streambench -leasehold $(BIN)/leasehold -store $$store -streams $$n -duration $(STREAM_DURATION); \
	done; done' | tee bench-streams.txt
	$(GO) tool benchstat bench-streams.txt

# bench-watch is not part of make bench: it measures the watch, not a lease path.
.PHONY: bench-watch
bench-watch: build ## What the watch costs per watcher: WATCHERS streams under WATCH_RATE claim+release pairs/s for WATCH_DURATION, both stores (bench-watch.txt)
	$(GO) build -o $(BIN)/watchbench ./internal/bench/watchbench
	set -o pipefail; $(WITH_PG) bash -c 'rc=0; for store in sqlite postgres; do \
	  $(BIN)/watchbench -leasehold $(BIN)/leasehold -store $$store -watchers "$(WATCHERS)" -duration $(WATCH_DURATION) -rate $(WATCH_RATE) || rc=1; \
	done; exit $$rc' | tee bench-watch.txt
	$(GO) tool benchstat bench-watch.txt

# bench-fleet-sim is not part of make bench: it restarts its PostgreSQL server and takes minutes.
SIM_SIDECARS ?= 20
SIM_STREAMS  ?= 1000
SIM_WATCHERS ?= 10
SIM_POOL     ?= 2
SIM_SERVER_CONNS ?= 20
SIM_STEADY   ?= 60s
SIM_OUTAGE   ?= 35s
SIM_IDLE     ?= 60s

.PHONY: bench-fleet-sim
bench-fleet-sim: build ## 1,000 pods simulated on SIM_SIDECARS=20 sidecars via PgBouncer (SIM_STREAMS=1000 SIM_WATCHERS=10 SIM_POOL=2 SIM_SERVER_CONNS=20 SIM_STEADY=60s SIM_OUTAGE=35s), an idle sidecar SIM_IDLE=60s (bench-fleet-sim.txt)
	@command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]] || { \
	  if [[ "$$(id -u)" == 0 ]]; then apt-get install -y pgbouncer || { apt-get update && apt-get install -y pgbouncer; }; \
	  else echo "bench-fleet-sim needs pgbouncer: install the Debian package pgbouncer (apt-get install -y pgbouncer, as root)"; exit 1; fi; }
	$(GO) build -o $(BIN)/fleetsim ./internal/bench/fleetsim
	set -o pipefail; $(WITH_PG) $(BIN)/fleetsim -leasehold $(BIN)/leasehold -sidecars $(SIM_SIDECARS) -streams $(SIM_STREAMS) \
	  -watchers $(SIM_WATCHERS) -pool $(SIM_POOL) -server-conns $(SIM_SERVER_CONNS) -steady $(SIM_STEADY) -outage $(SIM_OUTAGE) \
	  -idle-window $(SIM_IDLE) | tee bench-fleet-sim.txt

# make bench-http's load per point is DURATION when given (make bench-http DURATION=5s), else
# 10s (DURATION's default above is make chaos's). RUNS interleaved runs, CLIENTS per point.
BENCH_HTTP_DURATION = $(if $(filter file undefined,$(origin DURATION)),10s,$(DURATION))
RUNS      ?= 3
CLIENTS   ?= 1 8 32

.PHONY: bench-http
# etcd and its load client build in their own module (internal/bench/httpbench/etcdload) so that etcd's
# dependencies stay out of go.mod.
bench-http: build ## New grants/s from an outside client: sidecar (wrk) vs raw pgx, etcd, HTTP floor; DURATION=10s RUNS=3, BEFORE=an earlier leasehold binary for rows beside it (bench-http.txt)
	@command -v wrk >/dev/null || { \
	  if [[ "$$(id -u)" == 0 ]]; then apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }; \
	  else echo "bench-http needs wrk: install the Debian package wrk (apt-get install -y wrk, as root)"; exit 1; fi; }
	$(GO) build -o $(BIN)/httpbench ./internal/bench/httpbench
	cd internal/bench/httpbench/etcdload && GOWORK=off $(GO) build -o $(CURDIR)/$(BIN)/etcd go.etcd.io/etcd/server/v3 && GOWORK=off $(GO) build -o $(CURDIR)/$(BIN)/etcdload .
	$(WITH_PG) $(BIN)/httpbench -leasehold $(BIN)/leasehold -etcd $(BIN)/etcd -etcdload $(BIN)/etcdload \
	  -duration $(BENCH_HTTP_DURATION) -runs $(RUNS) -clients "$(CLIENTS)" $(if $(BEFORE),-before $(BEFORE)) -out bench-http.txt

# make bench-fleet: a fleet of sidecars on one PostgreSQL (docs/stores.md: A fleet on one PostgreSQL). Its load per point is
# DURATION when given, else 10s, like bench-http's; RUNS is 1 unless given. Each sidecar's store
# URL gets pool_max_conns=FLEET_POOL: 64 sidecars × 2 = 128 server connections directly, within
# with-postgres.sh's max_connections=300 (PgBouncer holds FLEET_BOUNCER_CONNS whatever the fleet).
FLEET     ?= 4 16 32 64
FLEET_CONNS ?= 2
FLEET_POOL ?= 2
FLEET_BOUNCER_CONNS ?= 16
FLEET_WATCHERS ?= 4
FLEET_STREAMS ?= 64
FLEET_STREAM_TTL ?= 3s
FLEET_RAW ?= 8 32
BENCH_FLEET_RUNS = $(if $(filter file undefined,$(origin RUNS)),1,$(RUNS))

.PHONY: bench-fleet
bench-fleet: build ## FLEET sidecars (4 16 32 64) on one PostgreSQL, direct and via PgBouncer, no notification vs watch vs 0004's trigger; FLEET_CONNS=2 claim conns/sidecar, FLEET_POOL=2, FLEET_BOUNCER_CONNS=16, FLEET_WATCHERS=4, FLEET_STREAMS=64, FLEET_STREAM_TTL=3s, FLEET_RAW="8 32", DURATION=10s, RUNS=1 (bench-fleet.txt)
	@command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]] || { \
	  if [[ "$$(id -u)" == 0 ]]; then apt-get install -y pgbouncer || { apt-get update && apt-get install -y pgbouncer; }; \
	  else echo "bench-fleet needs PgBouncer: install the Debian package pgbouncer (apt-get install -y pgbouncer, as root)"; exit 1; fi; }
	$(GO) build -o $(BIN)/fleetbench ./internal/bench/fleetbench
	$(WITH_PG) $(BIN)/fleetbench -leasehold $(BIN)/leasehold -fleet "$(FLEET)" -conns $(FLEET_CONNS) -pool $(FLEET_POOL) \
	  -bouncer-conns $(FLEET_BOUNCER_CONNS) -watchers $(FLEET_WATCHERS) -streams $(FLEET_STREAMS) -stream-ttl $(FLEET_STREAM_TTL) \
	  -raw "$(FLEET_RAW)" -duration $(BENCH_HTTP_DURATION) -runs $(BENCH_FLEET_RUNS) \
	  -trigger-sql leasecore/postgres/migrations/0004_watch.sql -out bench-fleet.txt

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

.PHONY: check-api
check-api: ## Fail when openapi.yaml breaks the latest release's HTTP API (oasdiff; docs/compatibility.md)
	GO=$(GO) scripts/check-api.sh

.PHONY: generate
generate: ## Regenerate code from openapi.yaml
	$(GO) generate ./...

.PHONY: check-generated
check-generated: generate ## Fail when generated files differ from what is committed
	@if [[ -n "$$(git status --porcelain -- sidecar/api)" ]]; then git status --short -- sidecar/api; git diff -- sidecar/api | head -50; echo "generated code is stale: run make generate and commit"; exit 1; fi

.PHONY: docs
# tfplugindocs builds the provider with go build in --provider-dir, which is therefore the main
# package; the docs, examples and templates directories are given relative to it.
docs: ## Regenerate the Terraform provider's docs (tfprovider/docs) from its schema and examples
	CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE=/dev/null $(GO) tool tfplugindocs generate \
	  --provider-dir cmd/terraform-provider-leasehold --provider-name leasehold \
	  --rendered-website-dir ../../tfprovider/docs --examples-dir ../../tfprovider/examples \
	  --website-source-dir ../../tfprovider/templates

.PHONY: check-docs
check-docs: docs ## Fail when tfprovider/docs differs from what is committed
	@if [[ -n "$$(git status --porcelain -- tfprovider/docs)" ]]; then git status --short -- tfprovider/docs; git diff -- tfprovider/docs | head -50; echo "provider docs are stale: run make docs and commit"; exit 1; fi

.PHONY: clean
clean: ## Remove build output
	rm -rf $(BIN) dist bench.txt bench-streams.txt bench-watch.txt bench-http.txt bench-fleet.txt bench-fleet-sim.txt
