# quiesce: the two commands of the quick start are `make run` and `make test`.
# Both use QUIESCE_REDIS_URL / QUIESCE_DATABASE_URL when set (and stop if they do not answer),
# else the default local ports, else private servers under .local/ (scripts/dev/services.sh).

SHELL := /bin/bash
CARGO ?= cargo
# Parallel test threads inside each test binary; every test has its own database and prefix.
TEST_THREADS ?= 4

# The API suite's modules that exercise the schedule (scheduling, claims, leases, locks, the
# version fence, dedup, dead letters, repair, wake-ups, a shard count change), run by make cluster
# against a Redis Cluster as well as by make test against one node.
CLUSTER_API_TESTS ?= debounce:: crash:: concurrency:: version_fence:: stale_writer:: ingest:: dead_letters:: repair:: shard_change:: wakeups::

.PHONY: run test clean-data console console-bench backtest-bench chaos cluster api-fuzz observability bench bench-cluster idle-cost ceilings soak retention-run slow-clients check sqlx-check sqlx-prepare fmt clippy services build clean-local

build:
	$(CARGO) build --bins --examples

services:
	@scripts/dev/services.sh

## run: build ./target/debug/quiesce and quiesce-loadgen, start Redis/Postgres if needed, apply
## migrations, serve on http://127.0.0.1:8080 with rules/default.toml
run: build
	@services=$$(scripts/dev/services.sh) && eval "$$services" && \
	./target/debug/quiesce migrate && \
	scripts/dev/example-request.sh && \
	exec ./target/debug/quiesce serve --insecure-dev

## test: the whole suite (unit, integration against real Redis and Postgres, `make run` smoke with
## every README command), then the checks that no secret appears in the run's logs
## (target/test-logs/) and that no test database or key was left behind; a few tests start Redis
## servers of their own, so the redis-server binary is needed (installed if missing)
test: export QUIESCE_TEST_LOG_DIR = $(CURDIR)/target/test-logs
test:
	@rm -rf "$$QUIESCE_TEST_LOG_DIR" && mkdir -p "$$QUIESCE_TEST_LOG_DIR" && \
	services=$$(QUIESCE_NEED_REDIS_SERVER=1 scripts/dev/services.sh) && eval "$$services" && \
	scripts/dev/test-leftovers.sh list >"$$QUIESCE_TEST_LOG_DIR/../test-leftovers-before.txt" && \
	$(CARGO) test --all-targets -- --test-threads $(TEST_THREADS) && \
	scripts/dev/smoke-make-run.sh && \
	$(CARGO) test --test secrets_in_logs -- --ignored && \
	scripts/dev/test-leftovers.sh since "$$QUIESCE_TEST_LOG_DIR/../test-leftovers-before.txt"

## clean-data: drop make run's database and delete its Redis keys (stop make run first); the
## ones of QUIESCE_DATABASE_URL and QUIESCE_REDIS_PREFIX when set
clean-data:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && scripts/dev/clean-data.sh

## console: the moderator console in a real browser (tests/console/): Debian's chromium and
## chromium-driver (installed when missing, as root), driven over WebDriver against a real
## quiesce; writes the screenshots in docs/console/
console:
	@scripts/dev/chromium.sh && \
	services=$$(scripts/dev/services.sh) && eval "$$services" && \
	$(CARGO) test --test console -- --ignored --test-threads 2

## console-bench: the console's Review page with 100k actions in a scratch database: first,
## middle, last and filtered pages timed over HTTP (BENCHMARKS.md)
console-bench:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/console/run.sh

## backtest-bench: a backtest over a week-sized run (200k entities' evaluations, 5M events)
## loaded into a scratch database: time and peak RSS of quiesce rules backtest (BENCHMARKS.md)
backtest-bench:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/backtest/run.sh

## chaos: the chaos suite (SIGKILLed workers, Redis flushed and restarted, Postgres cut off)
chaos:
	@services=$$(QUIESCE_NEED_REDIS_SERVER=1 scripts/dev/services.sh) && eval "$$services" && \
	$(CARGO) test --test chaos -- --ignored --test-threads 1 --nocapture

## cluster: a fresh private Redis Cluster (3 masters, 3 replicas; scripts/dev/redis-cluster.sh): the API
## suite's schedule tests against it, then the cluster suite (a master SIGKILLed under load, slots
## resharded under load, the shard count changed under load, 2 serve + 3 worker processes);
## the cluster is stopped afterwards
cluster:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && \
	scripts/dev/redis-cluster.sh stop && cluster=$$(scripts/dev/redis-cluster.sh start) && eval "$$cluster" && \
	QUIESCE_REDIS_URL="$$QUIESCE_CLUSTER_URL" $(CARGO) test --test api -- --test-threads $(TEST_THREADS) $(CLUSTER_API_TESTS) && \
	$(CARGO) test --test cluster -- --ignored --test-threads 1 --nocapture; \
	status=$$?; scripts/dev/redis-cluster.sh stop; exit $$status

## observability: a real Prometheus scrapes a live quiesce under load; checks every dashboard
## panel and alert in grafana/ (installs Debian's prometheus package if needed and allowed)
observability:
	@scripts/dev/prometheus.sh && \
	services=$$(scripts/dev/services.sh) && eval "$$services" && \
	$(CARGO) test --test observability -- --ignored --test-threads 1 --nocapture

## bench: quiesce vs the BullMQ and Graphile Worker debounce peers, a naive per-event baseline and
## the events-only and http-only ceiling builds (BENCH_CEILINGS=0 skips them): the targets table
## with hot entities and WAL per event (BENCHMARKS.md)
bench:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/ingest/run.sh

## bench-cluster: the batched burst on a private Redis Cluster (3 masters, 3 replicas, from
## QUIESCE_CLUSTER_PORT, default 7101) and on a private single node: keys and commands/s per
## master, max/min, fire delay, Redis bytes per pending entity (SCALING.md)
bench-cluster:
	@services=$$(QUIESCE_NEED_REDIS_SERVER=1 scripts/dev/services.sh) && eval "$$services" && bench/cluster/run.sh

## idle-cost: Redis commands per second of 3 idle worker processes with 1,000 shards, on the
## same private node and cluster (SCALING.md)
idle-cost:
	@services=$$(QUIESCE_NEED_REDIS_SERVER=1 scripts/dev/services.sh) && eval "$$services" && bench/idle-cost/run.sh

## ceilings: ingest rates with parts of the work patched out (bench/ceilings/), for BENCHMARKS.md
ceilings:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/ceilings/run.sh

## soak: steady load with nobody scraping /metrics; RSS of serve and worker (RELIABILITY.md)
soak:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/soak/run.sh

## retention-run: sustained load with a retention of minutes (test_short_retention); the events
## table's size over time, events in and out, a re-sent id inside the window (SCALING.md)
retention-run:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/retention-run/run.sh

## slow-clients: 600 slow unauthenticated connections beside one signed sender (SECURITY.md)
slow-clients:
	@services=$$(scripts/dev/services.sh) && eval "$$services" && bench/slow-clients/run.sh

## api-fuzz: schemathesis (PyPI, in .local/) against /openapi.json of a live server
api-fuzz: build
	@services=$$(scripts/dev/services.sh) && eval "$$services" && scripts/dev/api-fuzz.sh

fmt:
	$(CARGO) fmt --all

## check: what CI checks besides the tests
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

## sqlx-check: .sqlx/ (the query data builds check the SQL against, offline) matches the statements
## and the migrations, checked against a scratch database (scripts/dev/sqlx-check.sh)
sqlx-check:
	@scripts/dev/sqlx-check.sh

## sqlx-prepare: regenerate .sqlx/ after changing a statement or a migration; commit the result
sqlx-prepare:
	@scripts/dev/sqlx-check.sh --prepare

## clean-local: stop private instances started by scripts/dev/services.sh and delete their data
clean-local:
	-@[ -f .local/redis/redis.pid ] && kill "$$(cat .local/redis/redis.pid)" || true
	-@[ -f .local/postgres/postmaster.pid ] && scripts/dev/private-postgres.sh stop .local/postgres || true
	rm -rf .local
