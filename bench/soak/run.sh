#!/usr/bin/env bash
# `make soak`: steady load and nobody scraping /metrics. A `serve` (with its workers) and a
# separate `worker` process share one database and Redis prefix, both with the metrics listener
# off (they record all the same); the load generator sends SOAK_RATE events/s for SOAK_SECONDS
# and the RSS of both processes is sampled every 10 s. Memory must stay flat in the second half:
# recorded samples are folded by the recorder's upkeep, not kept for a scrape that never comes.
# Figures for RELIABILITY.md; release build; services as for `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=.local/soak
rm -rf "$out" && mkdir -p "$out"
seconds=${SOAK_SECONDS:-240}
rate=${SOAK_RATE:-5000}
# shellcheck source=bench/lib.sh
source bench/lib.sh

echo "soak: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
start_server soak QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=10s
env QUIESCE_DATABASE_URL="$DATABASE_URL_RUN" QUIESCE_REDIS_URL="$redis_url" \
  QUIESCE_REDIS_PREFIX="$REDIS_PREFIX_RUN" QUIESCE_METRICS_LISTEN=off QUIESCE_WORKER_ID=soak-worker \
  RUST_LOG=warn "$quiesce_bin" worker >"$out/worker.log" 2>&1 &
worker=$!
trap 'kill -TERM "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true; cleanup' EXIT

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
echo "seconds serve_kb worker_kb" >"$out/rss.txt"
(
  for ((t = 0; t <= seconds; t += 10)); do
    echo "$t $(rss "$server") $(rss "$worker")" >>"$out/rss.txt"
    sleep 10
  done
) &
sampler=$!
run_loadgen soak --scenario steady --entities 20000 --rate "$rate" --duration "${seconds}s" \
  --events $((rate * seconds)) --batch 50 --connections 16 --window 2s
wait "$sampler" || true
cat "$out/rss.txt"
half=$((seconds / 2 / 10 * 10))
awk -v half="$half" 'NR > 1 && $1 == half {s1 = $2; w1 = $3} NR > 1 {s2 = $2; w2 = $3; t = $1}
  END {printf "soak: second half (%d s to %d s): serve %d -> %d kB, worker %d -> %d kB\n", half, t, s1, s2, w1, w2}' \
  "$out/rss.txt"
