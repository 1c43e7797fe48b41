#!/usr/bin/env bash
# `make bench-traces` (and the last part of `make bench`): what exporting traces costs make
# bench's batched ingest (100,000 events in requests of 100 over 64 connections, 10,000
# entities, a 2 s window, so evaluations and their spans run beside ingest). Three servers per
# round, each on a database and prefix of its own: no OTLP endpoint; an endpoint with 1% of
# traces sampled (parentbased_traceidratio 0.01); an endpoint with every trace sampled. Two
# rounds, in turns, so that drift of the machine shows. The endpoint is a local OTLP/HTTP sink
# (bench/traces/sink.py) that reads each export and answers 200, counting exports and bytes.
# Prints a table and writes bench/results-traces/. Release build; services as for `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results-traces
rm -rf "$out" && mkdir -p "$out"
events=${BENCH_EVENTS:-100000}
entities=${BENCH_ENTITIES:-10000}
rounds=${BENCH_TRACE_ROUNDS:-2}
# shellcheck source=bench/lib.sh
source bench/lib.sh

echo "bench: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen

sink_port=$(free_port)
python3 bench/traces/sink.py "$sink_port" "$out/sink.json" &
sink=$!
trap 'kill "$sink" 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 50); do
  curl -fsS -o /dev/null -X POST "http://127.0.0.1:$sink_port/v1/traces" && break
  sleep 0.1
done

run() {
  local name=$1; shift
  start_server "$name" QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s "$@"
  run_loadgen "$name" --scenario burst --events "$events" --entities "$entities" --batch 100 \
    --connections 64 --window 2s --database-url "$DATABASE_URL_RUN"
  stop_server
  drop_runs
  curl -fsS -X POST "http://127.0.0.1:$sink_port/mark/$name" >/dev/null
}

endpoint=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port"
  OTEL_TRACES_SAMPLER=parentbased_traceidratio)
for round in $(seq "$rounds"); do
  run "off-$round"
  run "sampled-1pct-$round" "${endpoint[@]}" OTEL_TRACES_SAMPLER_ARG=0.01
  run "sampled-100pct-$round" "${endpoint[@]}" OTEL_TRACES_SAMPLER_ARG=1.0
done

python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
sink = json.load(open(f"{out}/sink.json"))
print("| run | round | events/s accepted | vs off (same round) | evaluations/s, mean | fire delay p99 | exports | MB exported |")
print("|---|---|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    off = json.load(open(f"{out}/off-{r}.json"))
    for name in ("off", "sampled-1pct", "sampled-100pct"):
        rep = json.load(open(f"{out}/{name}-{r}.json"))
        got = sink.get(f"{name}-{r}", {"exports": 0, "bytes": 0})
        ratio = rep["events_per_second"] / off["events_per_second"]
        drain = rep["drain"]
        print(f"| {name} | {r} | {rep['events_per_second']:,.0f} | {ratio:.2f} x | "
              f"{drain['evaluations_per_second_mean']:,.0f} | {drain['fire_delay_ms']['p99']:,.0f} ms | "
              f"{got['exports']} | {got['bytes'] / 1e6:.1f} |")
PY
