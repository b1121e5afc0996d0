# reviewledger — run `make help` for the targets.

SHELL    := bash
GO       ?= go
PKGS     ?= ./...
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/reviewledger
FUZZTIME ?= 20000x

# Development tokens for `make run` when REVIEWLEDGER_TOKENS is unset. They
# are printed at start; never use them anywhere but on a developer's machine.
DEV_TOKENS := submitter:dev-submitter:dev-submitter-token-0001,moderator:dev-moderator:dev-moderator-token-0001,auditor:dev-auditor:dev-auditor-token-0001,admin:dev-admin:dev-admin-token-00001

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-8s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# .ci/services starts PostgreSQL and NATS when none answers (a private
# cluster and nats-server in .data/ on a bare machine) and prints the
# export lines for the PostgreSQL it chose: TEST_DATABASE_URL, and
# DATABASE_URL (its reviewledger database, created there) unless set. A
# value set in the environment is kept.
SERVICES := svc="$$(.ci/services)" && eval "$$svc"

.PHONY: services
services: ## Start PostgreSQL and NATS when none answers (.ci/services) and print the export lines pointing at them; never reconfigures a server.
	@.ci/services

.PHONY: run
run: ## Run the service locally (serve), with development tokens unless REVIEWLEDGER_TOKENS is set.
	@$(SERVICES) && .ci/devinfo "$(DEV_TOKENS)" && \
	REVIEWLEDGER_TOKENS="$${REVIEWLEDGER_TOKENS:-$(DEV_TOKENS)}" $(GO) run -ldflags "$(LDFLAGS)" ./cmd/reviewledger serve

.PHONY: stop-services
stop-services: ## Stop the private PostgreSQL and NATS that make run or make test started in .data/ (none of the machine's own).
	@.ci/services --stop

.PHONY: topology
topology: ## Start the multi-node topology on this machine (3 NATS nodes, PostgreSQL primary and replica, API, 2 workers, 2 projector/sweeper processes) until Ctrl-C; private servers only (.ci/topology).
	.ci/topology

.PHONY: ha
ha: ## Start a private Patroni cluster (3 etcd members, 3 PostgreSQL nodes, synchronous_mode) until Ctrl-C and print its DATABASE_URL; never the machine's own server (.ci/ha).
	.ci/ha

.PHONY: pg-tuned
pg-tuned: ## Start a private PostgreSQL set up for production (shared_buffers a quarter of memory, autovacuum, pg_stat_statements) until Ctrl-C and print its -admin-url for bench-scale; never the machine's own server (.ci/pgtuned).
	.ci/pgtuned

.PHONY: build
build: ## Build the binary into bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/reviewledger

.PHONY: test
test: ## Run every test with the race detector, against the PostgreSQL (and NATS) .ci/services chose; the last line names every skipped test and why.
	@$(SERVICES) && $(GO) run ./cmd/testreport -race -count=1 -timeout 15m $(PKGS)

.PHONY: bench
bench: ## Run the benchmarks: event store (append/insert ratio), projection catch-up, engine throughput (and beside a hanging shadow, side by side), decoding; BELOW TARGET marks a figure under its target.
	$(GO) test -run '^$$' -bench . -benchtime 2s ./eventstore/pgstore/
	set -o pipefail; REVIEWLEDGER_BENCH_RATIO=1 $(GO) test -run '^TestAppendInsertRatio$$' -count=1 -v ./eventstore/pgstore/ | grep -E 'paired|alternating|target|^(--- )?FAIL'
	$(GO) run ./projections/internal/catchupbench -events 1000000 -store pgstore
	$(GO) test -run '^$$' -bench ReviewThroughput -benchtime 2000x -count 1 ./api/engine/
	$(GO) test -run '^$$' -bench 'DecodeEvent|DecodeStored|DecodeSubmit' -benchtime 1s ./domain/ ./api/httpapi/
	$(GO) run ./api/internal/loadgen

.PHONY: bench-e2e
bench-e2e: build ## End to end: the built binary over HTTP with an instant provider, 5,000 reviews from 32 clients per round, interleaved with a naive CRUD baseline (BENCH_FLAGS adds flags, e.g. -rounds 5).
	$(GO) run ./cmd/reviewledger-bench -bin $(BIN) $(BENCH_FLAGS)

.PHONY: bench-scale
bench-scale: build ## At scale: one ledger grown to 3,000,000 reviews through the product's write path, then end to end (ratio to the empty ledger), queue and SLO p99s, rebuild, audit, purge, bytes per review and a 30-minute steady load (BENCH_SCALE_FLAGS adds flags, e.g. -reviews 300000 -steady 5m).
	$(GO) run ./cmd/reviewledger-bench scale -bin $(BIN) $(BENCH_SCALE_FLAGS)

.PHONY: fuzz
fuzz: ## Fuzz the request decoders, the review ID parser, the event decoders (canonical and compact), the metadata scan and the binary metadata decoder briefly (FUZZTIME inputs each, default 20000x).
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSubmit$$' -fuzztime $(FUZZTIME) ./api/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJSON$$' -fuzztime $(FUZZTIME) ./api/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzReviewIDPath$$' -fuzztime $(FUZZTIME) ./api/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzValidateReviewID$$' -fuzztime $(FUZZTIME) ./domain/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./domain/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeStored$$' -fuzztime $(FUZZTIME) ./domain/
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./api/engine/provider/
	$(GO) test -run '^$$' -fuzz '^FuzzScanCompact$$' -fuzztime $(FUZZTIME) ./eventstore/ledger/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBinary$$' -fuzztime $(FUZZTIME) ./eventstore/ledger/

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: ## Vet, check formatting, and run golangci-lint (the version pinned in .ci/lint/go.mod, a module of its own, configured by .golangci.yml).
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi
	$(GO) build -C .ci/lint -o $(CURDIR)/bin/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	bin/golangci-lint run $(PKGS)
