#!/usr/bin/env bash
# `make bench-retries` (issue 43): ingest when senders retry. On one server (a release build, a
# database and Redis prefix of its own), the batched (100 events a request, 64 connections) and
# single-event (128 connections) bursts of `make bench` over 10k entities, each on unique ids and
# again with half the requests re-sending an earlier request whole (`--duplicates 0.5`), in this
# order: batched, batched-retried, single, single-retried. BENCH_RETRIES_WINDOW sets the debounce
# window (default 60s: ingest only, nothing evaluated during the runs; 2s: the evaluations run
# beside ingest and each run waits for its drain). Per run: events answered per second (new and
# duplicates), the server's and Postgres' CPU, and, when the shared Postgres loads
# pg_stat_statements, the run database's top statements (bench/results-retries/NAME.statements).
# Prints one line per run and the ratios retried / unique. Run it alone on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results-retries
rm -rf "$out" && mkdir -p "$out"
events=${BENCH_EVENTS:-100000}
entities=${BENCH_ENTITIES:-10000}
window=${BENCH_RETRIES_WINDOW:-60s}
# shellcheck source=bench/lib.sh
source bench/lib.sh

echo "bench-retries: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
statements=0
case $(psql "${base_db%/*}/postgres" -Atc 'SHOW shared_preload_libraries') in
  *pg_stat_statements*) statements=1 ;;
  *) echo "bench-retries: pg_stat_statements is not loaded: no time per statement" >&2 ;;
esac
ticks=$(getconf CLK_TCK)

start_server retries QUIESCE_DEBOUNCE_WINDOW="$window" QUIESCE_MAX_WAIT=60s
[ "$statements" = 0 ] || psql "$DATABASE_URL_RUN" -qc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements'
drain=()
[ "$window" = 60s ] || drain=(--database-url "$DATABASE_URL_RUN")
for run in batched batched-retried single single-retried; do
  case $run in
    batched*) shape=(--batch 100 --connections 64) ;;
    single*) shape=(--batch 1 --connections 128) ;;
  esac
  retried=()
  [[ $run == *-retried ]] && retried=(--duplicates 0.5)
  [ "$statements" = 0 ] || psql "$DATABASE_URL_RUN" -qAtc 'SELECT pg_stat_statements_reset()' >/dev/null
  server_before=$(cpu_ticks "$server")
  postgres_before=$(cpu_ticks $(pgrep -x postgres))
  run_loadgen "$run" --scenario burst --events "$events" --entities "$entities" --window "$window" \
    "${shape[@]}" "${retried[@]}" "${drain[@]}"
  echo "{\"server_cpu_s\": $(( ($(cpu_ticks "$server") - server_before) / ticks )), \"postgres_cpu_s\": $(( ($(cpu_ticks $(pgrep -x postgres)) - postgres_before) / ticks ))}" \
    >"$out/$run.cpu.json"
  if [ "$statements" = 1 ]; then
    psql "$DATABASE_URL_RUN" -c "SELECT calls, round(total_exec_time::numeric) AS ms,
             round(mean_exec_time::numeric, 2) AS mean_ms, rows,
             left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = current_database() ORDER BY total_exec_time DESC LIMIT 8" >"$out/$run.statements"
  fi
done
stop_server

python3 - "$out" "$window" <<'PY'
import json, pathlib, sys
out, window = pathlib.Path(sys.argv[1]), sys.argv[2]
runs = {}
print(f"window {window}")
for name in ("batched", "batched-retried", "single", "single-retried"):
    r = json.loads((out / f"{name}.json").read_text())
    cpu = json.loads((out / f"{name}.cpu.json").read_text())
    runs[name] = r
    drain = r.get("drain") or {}
    print(f"{name}: {r['events_accepted']:,} new + {r['duplicates']:,} duplicates, "
          f"{r['answered_per_second']:,.0f} answered/s, HTTP p50/p99 {r['http_latency_ms']['p50']:.1f}/"
          f"{r['http_latency_ms']['p99']:.1f} ms, errors {r['errors_by_status'] or 'none'}, "
          f"server CPU {cpu['server_cpu_s']} s, Postgres CPU {cpu['postgres_cpu_s']} s"
          + (f", {drain['evaluations']:,} evaluations for {drain['entities']:,} entities" if drain else ""))
for name in ("batched", "single"):
    ratio = runs[f"{name}-retried"]["answered_per_second"] / runs[name]["answered_per_second"]
    print(f"{name}: retried / unique = {ratio:.2f} (target >= 0.80)")
PY
