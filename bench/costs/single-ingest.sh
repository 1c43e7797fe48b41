#!/usr/bin/env bash
# bench/costs/single-ingest.sh (issue 43): where a single-event request's time goes. The
# one-event-per-request run of `make bench` (128 connections, 10k entities, BENCH_EVENTS events,
# a 60 s window so that nothing is evaluated) against this build and the http-only ceiling build
# (bench/ceilings/http-only.patch: the request parsed, authenticated and answered, nothing
# written), in alternating order over BENCH_SINGLE_ROUNDS rounds (default 2). Per run: requests
# per second, HTTP latency, and the CPU seconds of the server, of every Postgres process, of Redis
# and of the load generator (utime + stime over the run), and per request. Run it alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results-costs/single-ingest
rm -rf "$out" && mkdir -p "$out"
events=${BENCH_EVENTS:-100000}
rounds=${BENCH_SINGLE_ROUNDS:-2}
# shellcheck source=bench/lib.sh
source bench/lib.sh

echo "single-ingest: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
build_variant http-only
redis_pid=$( (redis-cli -u "$redis_url" info server || true) | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
ticks=$(getconf CLK_TCK)
for round in $(seq "$rounds"); do
  if ((round % 2)); then order=(as-is http-only); else order=(http-only as-is); fi
  for name in "${order[@]}"; do
    if [ "$name" = as-is ]; then quiesce_bin=target/release/quiesce; else quiesce_bin=$ceilings_work/bin/quiesce-http-only; fi
    start_server "single-$name-$round" QUIESCE_DEBOUNCE_WINDOW=60s QUIESCE_MAX_WAIT=120s
    s0=$(cpu_ticks "$server"); p0=$(cpu_ticks $(pgrep -x postgres)); r0=$(cpu_ticks "${redis_pid:-0}")
    t0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
    run_loadgen "$name-$round" --scenario burst --events "$events" --entities 10000 --batch 1 --connections 128
    t1=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
    echo "{\"server\": $(( $(cpu_ticks "$server") - s0 )), \"postgres\": $(( $(cpu_ticks $(pgrep -x postgres)) - p0 )), \"redis\": $(( $(cpu_ticks "${redis_pid:-0}") - r0 )), \"shell_children\": $((t1 - t0)), \"ticks\": $ticks}" >"$out/$name-$round.cpu.json"
    stop_server
    drop_runs
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, pathlib, sys
out, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
print("| build | round | requests/s | HTTP p50 / p99 ms | server CPU µs/request | Postgres CPU µs/request | Redis CPU µs/request | load generator (and psql) CPU µs/request |")
print("|---|---|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for name in ("as-is", "http-only"):
        rep = json.loads((out / f"{name}-{r}.json").read_text())
        cpu = json.loads((out / f"{name}-{r}.cpu.json").read_text())
        n = max(rep["requests"], 1)
        per = lambda key: cpu[key] / cpu["ticks"] / n * 1e6
        print(f"| {name} | {r} | {rep['events_per_second']:,.0f} | {rep['http_latency_ms']['p50']:.1f} / "
              f"{rep['http_latency_ms']['p99']:.1f} | {per('server'):.0f} | {per('postgres'):.0f} | {per('redis'):.0f} | "
              f"{per('shell_children'):.0f} |")
PY
