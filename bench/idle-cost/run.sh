#!/usr/bin/env bash
# `make idle-cost`: what idle workers cost Redis. 3 `quiesce worker` processes with 1,000
# shards and nothing due, on a private single node and on a private Redis Cluster of 3 masters
# and 3 replicas (scripts/dev/redis-cluster.sh); INFO commandstats of every node before and after
# 60 s (after a warm-up), printed as commands per second per node and per worker process, by
# command (bench/cluster/report.py idle). Figures in bench/results/idle/. Release build;
# Postgres as for `make test`.
#
#   QUIESCE_CLUSTER_PORT  first of the cluster's six ports (default 7101)
#   BENCH_NODE_PORT       the single node's port (default: the one after the cluster's)
#   IDLE_WORKERS, IDLE_SHARDS, IDLE_SECONDS, IDLE_WARMUP (default 3, 1000, 60, 15)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results/idle
rm -rf "$out" && mkdir -p "$out"
workers=${IDLE_WORKERS:-3}
shards=${IDLE_SHARDS:-1000}
seconds=${IDLE_SECONDS:-60}
warmup=${IDLE_WARMUP:-15}
# shellcheck source=bench/lib.sh
source bench/lib.sh
pids=()
stop_workers() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap 'stop_workers; cleanup; stop_private_servers' EXIT

echo "idle-cost: building (release)" >&2
cargo build --release --quiet --bin quiesce
start_private_servers
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# measure NAME URL: the worker processes on their own database and prefix, idle.
measure() {
  local name=$1 url=$2
  local db="quiesce_idle_${name}_$suffix" prefix="idle-$name-$suffix"
  dbs+=("$db"); prefixes+=("$prefix"); prefix_url[$prefix]=$url
  local database_url="${base_db%/*}/$db"
  local env=(QUIESCE_DATABASE_URL="$database_url" QUIESCE_REDIS_URL="$url" QUIESCE_REDIS_PREFIX="$prefix"
    QUIESCE_SHARDS="$shards" QUIESCE_METRICS_LISTEN=off RUST_LOG=warn)
  env "${env[@]}" "$quiesce_bin" migrate >/dev/null
  for i in $(seq "$workers"); do
    env "${env[@]}" QUIESCE_WORKER_ID="idle-$name-$i" "$quiesce_bin" worker >"$out/worker-$name-$i.log" 2>&1 &
    pids+=($!)
  done
  echo "idle-cost: $name: $workers workers, $shards shards, ${warmup}s warm-up, ${seconds}s measured" >&2
  sleep "$warmup"
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || { cat "$out"/worker-"$name"-*.log >&2; exit 1; }
  done
  snapshot_nodes "$url" "idle-$name-before"
  sleep "$seconds"
  snapshot_nodes "$url" "idle-$name-after"
  stop_workers
  drop_runs
}

measure node "$node_url"
measure cluster "$cluster_url"

{
  echo "{\"machine\": \"$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)\","
  echo " \"load\": \"$load_before / $(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"redis\": \"$(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/')\","
  echo " \"workers\": $workers, \"shards\": $shards, \"seconds\": $seconds, \"warmup\": $warmup}"
} >"$out/environment.json"
python3 bench/cluster/report.py idle "$out" | tee "$out/report.md"
