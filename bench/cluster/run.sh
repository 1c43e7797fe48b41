#!/usr/bin/env bash
# `make bench-cluster`: the batched burst of `make bench` (100k events over 10k entities, 100
# events a request, 64 connections, a 2 s window) on a private Redis Cluster of 3 masters and 3
# replicas (scripts/dev/redis-cluster.sh) and on a private single node, then the same events in
# small requests (20 a request, 4 senders), then its paced fire-delay run (10k entities over 5 s),
# then 100k entities left pending on each, then (on the cluster) issue 39's shape: 1 `quiesce
# serve` and 3 `quiesce worker` processes, 4 senders posting 20 events a request from random
# entities among 1,000 (1-4 events each), 0-20 ms apart, counted over 4 s in the middle of the
# send; prints per master the keys, the commands of each run
# (INFO commandstats, which counts the commands run inside Lua
# scripts), commands per second and CPU, the max/min across masters, events/s, evaluations per
# entity, fire delay and the load generator's duplicate and wrong actions, and Redis bytes per
# pending entity (bench/cluster/report.py). Every run's figures land in bench/results/cluster/.
# Release build; Postgres as for `make test`.
#
#   QUIESCE_CLUSTER_PORT  first of the cluster's six ports (default 7101)
#   BENCH_NODE_PORT       the single node's port (default: the one after the cluster's)
#   BENCH_EVENTS, BENCH_ENTITIES, BENCH_SHARDS (default 100000, 10000, 120)
#   BENCH_CLUSTER_RUNS    which runs: "burst random" (default), "burst" or "random"
#   RANDOM_WARMUP, RANDOM_SECONDS  the random run's send before counting, and its count (3, 4)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results/cluster
rm -rf "$out" && mkdir -p "$out"
events=${BENCH_EVENTS:-100000}
entities=${BENCH_ENTITIES:-10000}
shards=${BENCH_SHARDS:-120}
pending=100000
runs=${BENCH_CLUSTER_RUNS:-burst random}
random_warmup=${RANDOM_WARMUP:-3}
random_seconds=${RANDOM_SECONDS:-4}
# shellcheck source=bench/lib.sh
source bench/lib.sh
metrics_port=$((port + 1))
workers=()
random_load=
stop_workers() {
  for pid in "${workers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${workers[@]}"; do wait "$pid" 2>/dev/null || true; done
  workers=()
}
trap 'stop_workers; cleanup; stop_private_servers' EXIT

echo "bench-cluster: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
start_private_servers
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
redis-cli -p "$cluster_first" cluster nodes >"$out/cluster-nodes.txt"

# scrape LABEL [PORT...]: the /metrics of the server (and of the processes on the other metrics
# ports), one after the other in $out/LABEL.prom (report.py adds their counts up).
scrape() {
  local label=$1 p; shift
  for p in "$metrics_port" "$@"; do curl -fsS "http://127.0.0.1:$p/metrics"; done >"$out/$label.prom"
}

# measured LABEL LOADGEN-ARGS...: a load generator's run with the nodes' INFO and the server's
# metrics before and after it. The snapshots bracket the whole run: ingest, drain and its
# check's pause (the window + 1 s, idle). Metrics are scraped outside the snapshots (a scrape
# reads every shard's depth).
measured() {
  local label=$1; shift
  scrape "$label-before"
  snapshot_nodes "$redis_url" "$label-before"
  run_loadgen "$label" "$@" --window 2s --database-url "$DATABASE_URL_RUN"
  snapshot_nodes "$redis_url" "$label-after"
  scrape "$label-after"
}

# run_target NAME URL: the burst and the pending run against one Redis.
run_target() {
  local name=$1
  redis_url=$2
  # 1. The batched burst.
  start_server "burst-$name" QUIESCE_SHARDS="$shards" QUIESCE_DEBOUNCE_WINDOW=2s \
    QUIESCE_MAX_WAIT=60s QUIESCE_METRICS_LISTEN="127.0.0.1:$metrics_port"
  local prefix=$REDIS_PREFIX_RUN
  measured "burst-$name" --scenario burst --events "$events" --entities "$entities" \
    --batch 100 --connections 64
  count_prefix_keys "$redis_url" "$prefix" "burst-$name"
  # 2. Small requests: the same events, 20 a request from 4 senders (a platform that sends as
  # events come), where each request's schedule reports to the shard index on its own.
  measured "small-$name" --scenario burst --events "$events" --entities "$entities" \
    --batch 20 --connections 4
  # The fire-delay run of `make bench`, on the same server: one event for each entity over 5 s,
  # so that due times spread out and the delay is the scheduler's, not a queue's.
  measured "paced-$name" --scenario burst --events "$entities" --entities "$entities" \
    --batch 20 --connections 16 --rate $((entities / 5))
  stop_server
  drop_runs

  # 3. Entities pending: one event each and a window longer than the run (entity ids as in
  # `make bench`'s memory run, 17 characters).
  start_server "pending-$name" QUIESCE_SHARDS="$shards" QUIESCE_DEBOUNCE_WINDOW=10m \
    QUIESCE_MAX_WAIT=20m
  prefix=$REDIS_PREFIX_RUN
  snapshot_nodes "$redis_url" "pending-$name-before"
  echo "bench: pending-$name" >&2
  "$loadgen" --url "http://127.0.0.1:$port" --json --run-id memory --scenario burst \
    --events "$pending" --entities "$pending" --batch 100 --connections 64 >"$out/pending-$name.json"
  snapshot_nodes "$redis_url" "pending-$name-after"
  count_prefix_keys "$redis_url" "$prefix" "pending-$name"
  stop_server
  drop_runs
}

# random_run: issue 39's shape on the cluster. One `quiesce serve` and three `quiesce worker`
# processes (each its own metrics port), 4 senders posting 20 events a request from random
# entities among 1,000 (1-4 events each), each sender pausing 0-20 ms after each request, for
# RANDOM_WARMUP + RANDOM_SECONDS + 1 s. The nodes are counted over RANDOM_SECONDS from
# RANDOM_WARMUP on (entities fall due 2 s after their last event, so by then evaluations run as
# the events come); the load generator then checks the drain as in the other runs.
random_run() {
  redis_url=$cluster_url
  local env=(QUIESCE_SHARDS="$shards" QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s)
  start_server random-cluster "${env[@]}" QUIESCE_METRICS_LISTEN="127.0.0.1:$metrics_port"
  local prefix=$REDIS_PREFIX_RUN ports=() i wport
  for i in 1 2 3; do
    wport=$(free_port)
    ports+=("$wport")
    env QUIESCE_DATABASE_URL="$DATABASE_URL_RUN" QUIESCE_REDIS_URL="$redis_url" \
      QUIESCE_REDIS_PREFIX="$prefix" QUIESCE_METRICS_LISTEN="127.0.0.1:$wport" \
      QUIESCE_WORKER_ID="random-worker-$i" RUST_LOG=warn "${env[@]}" \
      "$quiesce_bin" worker >"$out/worker-random-$i.log" 2>&1 &
    workers+=($!)
  done
  for wport in "${ports[@]}"; do
    for _ in $(seq 300); do curl -fsS "http://127.0.0.1:$wport/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  done
  echo "bench: random-cluster" >&2
  random_load=$(cut -d' ' -f1-3 /proc/loadavg)
  "$loadgen" --url "http://127.0.0.1:$port" --json --run-id random-cluster --scenario random \
    --events 1000000 --entities 1000 --batch 20 --connections 4 --pause 20ms \
    --duration "$((random_warmup + random_seconds + 1))s" --window 2s \
    --database-url "$DATABASE_URL_RUN" >"$out/random-cluster.json" &
  local sender=$!
  sleep "$random_warmup"
  scrape random-cluster-before "${ports[@]}"
  snapshot_nodes "$redis_url" random-cluster-before
  sleep "$random_seconds"
  snapshot_nodes "$redis_url" random-cluster-after
  scrape random-cluster-after "${ports[@]}"
  wait "$sender"
  count_prefix_keys "$redis_url" "$prefix" random-cluster
  stop_workers
  stop_server
  drop_runs
}

case " $runs " in *" burst "*)
  run_target cluster "$cluster_url"
  run_target node "$node_url" ;;
esac
case " $runs " in *" random "*) random_run ;; esac

{
  echo "{\"machine\": \"$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)\","
  echo " \"load\": \"$load_before / $(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"redis\": \"$(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/')\","
  echo " \"postgres\": \"$(psql "${base_db%/*}/postgres" -Atc 'SHOW server_version')\","
  echo " \"events\": $events, \"entities\": $entities, \"shards\": $shards, \"pending\": $pending,"
  echo " \"random_warmup\": $random_warmup, \"random_seconds\": $random_seconds, \"random_load\": \"${random_load:-}\","
  echo " \"cluster_url\": \"$cluster_url\", \"node_url\": \"$node_url\"}"
} >"$out/environment.json"
python3 bench/cluster/report.py burst "$out" | tee "$out/report.md"
