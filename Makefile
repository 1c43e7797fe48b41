# quiesce: the two commands of the quick start are `make run` and `make test`; `make help` lists
# every target. Both use QUIESCE_REDIS_URL / QUIESCE_DATABASE_URL when set (and stop if they do
# not answer), else the default local ports, else private servers under .local/
# (scripts/dev/services.sh). Setup and check scripts are in scripts/dev/; each measurement is in
# bench/<name>/, its runner (run.sh) beside its report.

SHELL := /bin/bash
CARGO ?= cargo
# Parallel test threads inside each test binary; every test has its own database and prefix.
TEST_THREADS ?= 4

# The API suite's modules that exercise the schedule (scheduling, claims, leases, locks, the
# version fence, dedup, dead letters, repair, wake-ups, a shard count change), run by make cluster
# against a Redis Cluster as well as by make test against one node.
CLUSTER_API_TESTS ?= debounce:: crash:: concurrency:: version_fence:: stale_writer:: ingest:: dead_letters:: repair:: shard_change:: wakeups::

# The services' environment (QUIESCE_REDIS_URL, QUIESCE_DATABASE_URL), found or started by
# scripts/dev/services.sh, for the commands that follow in the same recipe line:
# `@$(WITH_SERVICES) command`. WITH_SERVICES_AND_REDIS_SERVER also makes sure the redis-server
# binary is installed, for the tests and benches that start Redis servers of their own.
services_env = services=$$($(1)scripts/dev/services.sh) && eval "$$services" &&
WITH_SERVICES = $(call services_env,)
WITH_SERVICES_AND_REDIS_SERVER = $(call services_env,QUIESCE_NEED_REDIS_SERVER=1 )

CLIPPY = $(CARGO) clippy --all-targets -- -D warnings

.PHONY: help run test clean-data image units console console-bench backtest-bench chaos cluster ha ha-figures api-fuzz observability bench bench-statements bench-costs bench-retries bench-ab soak-ingest bench-traces bench-cluster idle-cost ceilings soak retention-run slow-clients check sqlx-check sqlx-prepare fmt clippy services build clean-local

## build: build the binaries (quiesce, quiesce-loadgen) and examples/, debug; `make` alone does this
build:
	$(CARGO) build --bins --examples

## help: list every target with its one-line description (the `## target:` lines of this file)
help:
	@awk 'match($$0, /^## [a-z-]+: /) { printf "  %-15s %s\n", substr($$0, 4, RLENGTH - 5), substr($$0, RLENGTH + 1) }' $(firstword $(MAKEFILE_LIST))

## services: find or start Redis and Postgres; print their environment as export lines
services:
	@scripts/dev/services.sh

## run: build, start Redis/Postgres if needed, migrate, serve on http://127.0.0.1:8080
# Builds ./target/debug/quiesce and quiesce-loadgen, applies the migrations, prints an example
# request and serves with rules/default.toml.
run: build
	@$(WITH_SERVICES) \
	./target/debug/quiesce migrate && \
	scripts/dev/example-request.sh && \
	exec ./target/debug/quiesce serve --insecure-dev

## test: the whole suite and the make run smoke, then the secrets-in-logs and leftovers checks
# Unit and integration tests against real Redis and Postgres, the `make run` smoke with every
# command of the README and docs/, then the checks that no secret appears in the run's logs (target/test-logs/)
# and that no test database or key was left behind; a few tests start Redis servers of their own,
# so the redis-server binary is needed (installed if missing). First, Postgres is asked whether
# its free connections hold TEST_THREADS test threads (up to 10 connections each,
# scripts/dev/test-connections.sh): if not, fewer threads run, as many as fit, and it says so;
# if not even one fits it stops, saying what to do. The leftovers check runs whether the tests
# passed or not (the run's exit status stays the tests'), and names what an earlier run left
# without failing this one.
test: export QUIESCE_TEST_LOG_DIR = $(CURDIR)/target/test-logs
test:
	@rm -rf "$$QUIESCE_TEST_LOG_DIR" && mkdir -p "$$QUIESCE_TEST_LOG_DIR" && \
	$(WITH_SERVICES_AND_REDIS_SERVER) \
	threads=$$(scripts/dev/test-connections.sh $(TEST_THREADS)) && \
	before="$$QUIESCE_TEST_LOG_DIR/../test-leftovers-before.txt" && \
	scripts/dev/test-leftovers.sh list >"$$before" && \
	{ $(CARGO) test --all-targets -- --test-threads $$threads && \
	  scripts/dev/smoke-make-run.sh && \
	  $(CARGO) test --test secrets_in_logs -- --ignored; \
	  status=$$?; scripts/dev/test-leftovers.sh since "$$before" || [ $$status -ne 0 ] || status=1; \
	  exit $$status; }

## clean-data: drop make run's database and delete its Redis keys (stop make run first)
# The ones of QUIESCE_DATABASE_URL and QUIESCE_REDIS_PREFIX when set.
clean-data:
	@$(WITH_SERVICES) scripts/dev/clean-data.sh

## console: the moderator console in a real browser over WebDriver (tests/console/)
# Debian's chromium and chromium-driver (installed when missing, as root) against a real quiesce;
# writes the screenshots in docs/console/.
console:
	@scripts/dev/chromium.sh && \
	$(WITH_SERVICES) \
	$(CARGO) test --test console -- --ignored --test-threads 2

## console-bench: the console's Review page with 100k actions and its queue with 100k waiting items, timed (bench/console/, BENCHMARKS.md)
# 100k actions and 100k waiting flags in a scratch database: first, middle, last and filtered pages
# of Review, the queue and its API timed over HTTP.
console-bench:
	@$(WITH_SERVICES) bench/console/run.sh

## backtest-bench: time and peak RSS of a week-sized backtest (bench/backtest/, BENCHMARKS.md)
# 200k entities' evaluations and 5M events loaded into a scratch database, then quiesce rules
# backtest over them.
backtest-bench:
	@$(WITH_SERVICES) bench/backtest/run.sh

## chaos: the chaos suite (SIGKILLed workers, Redis flushed and restarted, Postgres cut off)
chaos:
	@$(call services_env,QUIESCE_NEED_REDIS_SERVER=1 QUIESCE_NEED_FAKETIME=1 ) \
	$(CARGO) test --test chaos -- --ignored --test-threads 1 --nocapture

## cluster: the schedule's API tests and the cluster suite on a fresh private Redis Cluster
# 3 masters and 3 replicas (scripts/dev/redis-cluster.sh); the cluster suite SIGKILLs a master,
# reshards slots and changes the shard count under load, with 2 serve + 3 worker processes; the
# cluster is stopped afterwards.
cluster:
	@$(WITH_SERVICES) \
	scripts/dev/redis-cluster.sh stop && cluster=$$(scripts/dev/redis-cluster.sh start) && eval "$$cluster" && \
	QUIESCE_REDIS_URL="$$QUIESCE_CLUSTER_URL" $(CARGO) test --test api -- --test-threads $(TEST_THREADS) $(CLUSTER_API_TESTS) && \
	$(CARGO) test --test cluster -- --ignored --test-threads 1 --nocapture; \
	status=$$?; scripts/dev/redis-cluster.sh stop; exit $$status

## ha: the Postgres failover suite on a private Patroni cluster behind HAProxy, reads from a replica, a restore drill (tests/ha/)
# 3 PostgreSQL 15 nodes under Patroni (from PyPI, in .local/patroni/) with etcd, synchronous_mode,
# behind HAProxy (scripts/dev/postgres-ha.sh; Debian's packages installed when missing): under
# load through HAProxy's read-write port the leader's node is killed, its postgres alone, it is
# switched over, frozen and resumed, and made read-only; reads go to a replica whose replay is
# paused; a point-in-time restore is drilled (scripts/dev/restore-drill.sh). HA_RUNS=N repeats
# each failover N times. The cluster and the drill's servers are stopped afterwards.
HA_RUNS ?= 1
ha:
	@$(WITH_SERVICES) \
	scripts/dev/postgres-ha.sh stop && ha=$$(scripts/dev/postgres-ha.sh start) && eval "$$ha" && \
	HA_RUNS=$(HA_RUNS) $(CARGO) test --test ha -- --ignored --test-threads 1 --nocapture $(HA_TESTS); \
	status=$$?; scripts/dev/postgres-ha.sh stop; scripts/dev/restore-drill.sh stop; exit $$status

## ha-figures: each failover of make ha repeated HA_FIGURE_RUNS (10) times: p50 and max of its windows, held to the targets (RELIABILITY.md); HA_RELEASE=1 runs quiesce's release build, as production does
HA_FIGURE_RUNS ?= 10
HA_RELEASE ?=
ha-figures:
	@if [ -n "$(HA_RELEASE)" ]; then $(CARGO) build --release --bin quiesce && \
	  export QUIESCE_TEST_BINARY=$(CURDIR)/target/release/quiesce; fi; \
	HA_CHECK_TARGETS=1 $(MAKE) --no-print-directory ha HA_RUNS=$(HA_FIGURE_RUNS) HA_TESTS=failover_

## image: a static (musl) build in a container image from scratch (buildah), checked and run against the local services
image:
	@scripts/dev/image.sh

## units: systemd-analyze verify on deploy/systemd/ and each unit's security exposure score
units:
	@$(CARGO) build --bin quiesce && scripts/dev/verify-units.sh

## observability: a real Prometheus scrapes a live quiesce; checks every panel and alert in grafana/
# Under load; installs Debian's prometheus package if needed and allowed.
observability:
	@scripts/dev/prometheus.sh && \
	$(WITH_SERVICES) \
	$(CARGO) test --test observability -- --ignored --test-threads 1 --nocapture

## bench: the ingest targets table: quiesce vs its peers and ceilings (bench/ingest/, BENCHMARKS.md)
# quiesce vs the BullMQ and Graphile Worker debounce peers, a naive per-event baseline and the
# events-only and http-only ceiling builds (BENCH_CEILINGS=0 skips them), with hot entities and
# WAL per event; a burst of 50,000 entities on this build, on the evaluation floor build and on
# the peers whose jobs do the same work (bench/peers/work.sh; BENCH_EVALUATIONS=0 skips them);
# then the traces' cost and the 10-minute ingest soak (make soak-ingest; BENCH_SOAK=0 skips it).
bench:
	@$(WITH_SERVICES) bench/ingest/run.sh
	@$(WITH_SERVICES) bench/traces/run.sh
	@[ "$${BENCH_SOAK:-1}" = 0 ] || { $(WITH_SERVICES) bench/soak/ingest.sh; }

## bench-ab: the working tree beside BASELINE=<commit>, built and run in the same run: batched then single-event ingest with evaluations beside it, and the BullMQ peer (bench/ab/)
# AB_ROUNDS (2) rounds in alternating order; CANDIDATE=<commit> instead of the working tree;
# AB_PEER=0 leaves the peer out. Run it alone.
bench-ab:
	@$(WITH_SERVICES) bench/ab/run.sh

## soak-ingest: ingest in a closed loop for 10 minutes with evaluations beside it: the rate of each minute, the last against the second, and RSS (bench/soak/ingest.sh)
# SOAK_INGEST_SECONDS (600), SOAK_INGEST_SENDERS (6), SOAK_INGEST_BATCH (50), SOAK_INGEST_ENTITIES (20,000); `make bench` runs it last.
soak-ingest:
	@$(WITH_SERVICES) bench/soak/ingest.sh

## bench-statements: what statements of reasons cost the 50,000-entity burst's evaluations, with and without a third of the entities hidden (bench/statements/, BENCHMARKS.md)
bench-statements:
	@$(WITH_SERVICES) bench/statements/run.sh

## bench-retries: ingest when senders retry: the batched and single bursts on unique ids and with half the requests re-sent, on one server (BENCH_RETRIES_WINDOW=2s runs the evaluations beside them; bench/retries/)
bench-retries:
	@$(WITH_SERVICES) bench/retries/run.sh

## bench-costs: an itemised cost table of an evaluation: the 50,000-entity burst on builds with one part of its work taken out each, beside this build and the floor, with CPU per process and Postgres time per statement (bench/costs/)
# BENCH_COST_ROUNDS (1) rounds in alternating order; BENCH_COST_RULES=<file> for other rules.
# `make bench` runs it too, beside the floor (BENCH_COSTS=0 skips it there).
bench-costs:
	@$(WITH_SERVICES) bench/costs/run.sh

## bench-traces: what exporting traces over OTLP costs the batched ingest, at 1% and 100% sampling (bench/traces/, BENCHMARKS.md)
bench-traces:
	@$(WITH_SERVICES) bench/traces/run.sh

## bench-cluster: the batched burst on a private Redis Cluster and one node (bench/cluster/, SCALING.md)
# 3 masters and 3 replicas from QUIESCE_CLUSTER_PORT (default 7101), and a private single node;
# the burst, the same events in small requests and the paced run: keys and commands/s per
# master, max/min, fire delay; Redis bytes per pending entity; then issue 39's shape (random
# entities, 1 serve + 3 workers) on the cluster. BENCH_CLUSTER_RUNS=random runs that one alone.
bench-cluster:
	@$(WITH_SERVICES_AND_REDIS_SERVER) bench/cluster/run.sh

## idle-cost: Redis commands/s of 3 idle workers with 1,000 shards (bench/idle-cost/, SCALING.md)
# On the same private node and cluster as bench-cluster.
idle-cost:
	@$(WITH_SERVICES_AND_REDIS_SERVER) bench/idle-cost/run.sh

## ceilings: ingest rates with parts of the work patched out (bench/ceilings/, BENCHMARKS.md)
ceilings:
	@$(WITH_SERVICES) bench/ceilings/run.sh

## soak: steady load at 80% of a closed-loop probe's rate: latency, Postgres waits, RSS (bench/soak/)
# SOAK_SECONDS (180), SOAK_SHARE (0.8) of the probe's sustained rate (SOAK_PROBE_EVENTS, 1,000,000),
# or SOAK_RATE events/s without the probe; /metrics unscraped; RELIABILITY.md has the figures.
soak:
	@$(WITH_SERVICES) bench/soak/run.sh

## retention-run: sustained load with a retention of minutes (bench/retention-run/, SCALING.md)
# test_short_retention: the events table's size over time, events in and out, a re-sent id inside
# the window.
retention-run:
	@$(WITH_SERVICES) bench/retention-run/run.sh

## slow-clients: 600 slow unauthenticated connections and one signed sender (bench/slow-clients/, SECURITY.md)
slow-clients:
	@$(WITH_SERVICES) bench/slow-clients/run.sh

## api-fuzz: schemathesis (PyPI, in .local/) against /openapi.json of a live server
api-fuzz: build
	@$(WITH_SERVICES) scripts/dev/api-fuzz.sh

## fmt: format every Rust file in place
fmt:
	$(CARGO) fmt --all

## check: what CI checks besides the tests: formatting, then clippy
check:
	$(CARGO) fmt --all -- --check
	$(CLIPPY)

## clippy: the lints over every target, every warning an error (make check runs them too)
clippy:
	$(CLIPPY)

## sqlx-check: .sqlx/ matches the statements and the migrations (checked on a scratch database)
# .sqlx/ is the query data builds check the SQL against, offline (scripts/dev/sqlx-check.sh).
sqlx-check:
	@scripts/dev/sqlx-check.sh

## sqlx-prepare: regenerate .sqlx/ after changing a statement or a migration; commit the result
sqlx-prepare:
	@scripts/dev/sqlx-check.sh --prepare

## clean-local: stop the private servers started by scripts/dev/services.sh and delete their data
clean-local:
	-@[ -f .local/redis/redis.pid ] && kill "$$(cat .local/redis/redis.pid)" || true
	-@[ -f .local/postgres/postmaster.pid ] && scripts/dev/private-postgres.sh stop .local/postgres || true
	rm -rf .local
