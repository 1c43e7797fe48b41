#!/usr/bin/env bash
# `make bench`: quiesce, the BullMQ debounce peer (same Redis) and the Graphile Worker durable
# debounce peer (same Postgres) on the same workload, plus a naive per-event baseline and the
# ingest-only runs of the events-only and http-only ceiling builds (bench/ceilings/; skipped with
# BENCH_CEILINGS=0), in one go. Prints the targets table (bench/ingest/report.py) and writes
# bench/results/ (JSON of every run, table.md, plot.png). Each quiesce run and the Graphile peer
# have a database of their own and each Redis user a prefix, dropped afterwards. Every quiesce
# run records the Postgres WAL it caused per accepted event. Release build; services as for
# `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results
rm -rf "$out" && mkdir -p "$out"
events=${BENCH_EVENTS:-100000}
entities=${BENCH_ENTITIES:-10000}
# shellcheck source=bench/lib.sh
source bench/lib.sh

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
ceilings=()
if [ "${BENCH_CEILINGS:-1}" != 0 ]; then
  ceilings=(events-only http-only)
  for name in "${ceilings[@]}"; do build_variant "$name"; done
fi
if [ "${BENCH_EVALUATIONS:-1}" != 0 ]; then build_variant evaluation-floor; fi
peer_deps bullmq
peer_deps graphile
if [ ! -x .local/bench-venv/bin/python ]; then
  python3 -m venv .local/bench-venv
  .local/bench-venv/bin/pip install -q -r bench/ingest/requirements.txt
fi

# 1. quiesce, debounced: a 2 s window, max wait well above the run.
start_server debounced QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s
# Fire delay: 10k entities whose due times spread over 5 s (one event each, 2,000/s).
run_loadgen paced --scenario burst --events "$entities" --entities "$entities" --batch 20 \
  --connections 16 --rate $((entities / 5)) --window 2s --database-url "$DATABASE_URL_RUN"
run_loadgen batched --scenario burst --events "$events" --entities "$entities" --batch 100 \
  --connections 64 --window 2s --database-url "$DATABASE_URL_RUN"
# Hot entities: 10 entities get 90% of the events (a viral post under a vote storm).
run_loadgen hot --scenario hot --events "$events" --entities "$entities" --batch 100 \
  --connections 64 --window 2s --database-url "$DATABASE_URL_RUN"
run_loadgen single --scenario burst --events "$events" --entities "$entities" --batch 1 \
  --connections 128 --window 2s --database-url "$DATABASE_URL_RUN"
# Senders that retry: the batched and single runs again with half the requests re-sending an
# earlier request whole (--duplicates 0.5), as after a timeout or a 503: the rate the sender sees
# (events answered, new and duplicates) beside the same runs' rate on unique ids.
run_loadgen batched-retried --scenario burst --events "$events" --entities "$entities" --batch 100 \
  --connections 64 --window 2s --duplicates 0.5 --database-url "$DATABASE_URL_RUN"
run_loadgen single-retried --scenario burst --events "$events" --entities "$entities" --batch 1 \
  --connections 128 --window 2s --duplicates 0.5 --database-url "$DATABASE_URL_RUN"
run_loadgen sloan --scenario sloan --entities 20 --batch 1 --connections 1 --window 2s \
  --database-url "$DATABASE_URL_RUN"
stop_server

# 1b. The same batched and single runs with attributes on every event (a reason and a score,
# `quiesce-loadgen --attributes`) and rules that read them (bench/ingest/attributes.toml: the
# default rules and shadow rules over the attributes, so every evaluation reads the aggregates
# and the actions stay the default rules'). Skipped with BENCH_ATTRIBUTES=0.
if [ "${BENCH_ATTRIBUTES:-1}" != 0 ]; then
  with_attributes=(--attributes --rules bench/ingest/attributes.toml)
  start_server attributes QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s \
    QUIESCE_RULES=bench/ingest/attributes.toml
  run_loadgen batched-attributes --scenario burst --events "$events" --entities "$entities" --batch 100 \
    --connections 64 --window 2s --database-url "$DATABASE_URL_RUN" "${with_attributes[@]}"
  run_loadgen single-attributes --scenario burst --events "$events" --entities "$entities" --batch 1 \
    --connections 128 --window 2s --database-url "$DATABASE_URL_RUN" "${with_attributes[@]}"
  stop_server
fi

# 1c. Evaluations at this machine's limit (issue 27): a burst of 50,000 entities (2 events each,
# BENCH_BIG_ENTITIES) on this build; the same burst and the 10,000-entity one on the evaluation
# floor build (bench/ceilings/evaluation-floor.patch: the same claim, lock and ack, with one
# statement per batch that reads the counts and writes a minimal evaluation: no rules, no
# fence, no action); then the peers whose jobs do the same work as an evaluation
# (bench/peers/work.sh) on the 50,000-entity burst. Skipped with BENCH_EVALUATIONS=0.
if [ "${BENCH_EVALUATIONS:-1}" != 0 ]; then
  big=${BENCH_BIG_ENTITIES:-50000}
  burst_runs() {
    run_loadgen "$1-big" --scenario burst --events $((big * 2)) --entities "$big" --batch 100 \
      --connections 64 --window 2s --database-url "$DATABASE_URL_RUN"
  }
  start_server big QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s
  burst_runs quiesce
  stop_server
  floor_bin=$ceilings_work/bin/quiesce-evaluation-floor
  quiesce_bin=$floor_bin start_server floor QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s
  burst_runs floor
  run_loadgen floor-batched --scenario burst --events "$events" --entities "$entities" --batch 100 \
    --connections 64 --window 2s --database-url "$DATABASE_URL_RUN"
  stop_server
  drop_runs
  [ "${BENCH_COSTS:-1}" = 0 ] || bench/costs/run.sh >"$out/costs.md"
  bench/peers/work.sh $((big * 2)) "$big" "$out" >"$out/peers-work.md"
fi

# 2. The naive baseline: evaluate as events arrive (a 1 ms window and max wait).
start_server naive QUIESCE_DEBOUNCE_WINDOW=1ms QUIESCE_MAX_WAIT=1ms
run_loadgen naive-sloan --scenario sloan --entities 20 --batch 1 --connections 1 --window 10ms \
  --database-url "$DATABASE_URL_RUN"
stop_server

# 3. Memory: 100k entities pending (a window longer than the run), Redis bytes per entity and
# the server's RSS.
start_server memory QUIESCE_DEBOUNCE_WINDOW=10m QUIESCE_MAX_WAIT=20m
prefix=$REDIS_PREFIX_RUN
run_loadgen memory --scenario burst --events 100000 --entities 100000 --batch 100 --connections 64
redis_bytes=0
for key in $(redis-cli -u "$redis_url" --scan --pattern "{$prefix:*"); do
  bytes=$(redis-cli -u "$redis_url" memory usage "$key" samples 0)
  redis_bytes=$((redis_bytes + ${bytes:-0}))
done
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
pending=$(redis-cli -u "$redis_url" --scan --pattern "{$prefix:*}:due" | xargs -r -n1 redis-cli -u "$redis_url" zcard | awk '{s+=$1} END {print s+0}')
echo "{\"pending\": $pending, \"redis_bytes\": $redis_bytes, \"rss_kb\": $rss_kb}" >"$out/memory-figures.json"
stop_server

# 4. Ingest only (a 60 s window, nothing evaluated during the run), as make ceilings runs it: this
# build and the ceiling builds, in alternating order over BENCH_CEILING_ROUNDS rounds (default 2).
rounds=${BENCH_CEILING_ROUNDS:-2}
mkdir -p "$ceilings_work/bin" && cp target/release/quiesce "$ceilings_work/bin/quiesce-as-is"
variants=(as-is "${ceilings[@]}")
for round in $(seq "$rounds"); do
  if ((round % 2)); then order=("${variants[@]}"); else mapfile -t order < <(printf '%s\n' "${variants[@]}" | tac); fi
  for name in "${order[@]}"; do
    quiesce_bin="$ceilings_work/bin/quiesce-$name" ingest_only "ingest-$name-$round" "$events" "$events"
  done
done
echo "{\"rounds\": $rounds, \"variants\": [$(printf '"%s",' "${variants[@]}" | sed 's/,$//')]}" \
  >"$out/ingest-only.json"

# 5. BullMQ on the same Redis and workload.
echo "bench: bullmq" >&2
node bench/peers/bullmq/bench.js --redis "$redis_url" --events "$events" --entities "$entities" \
  --window-ms 2000 --in-flight 256 --prefix "bench-bullmq-$suffix" >"$out/bullmq.json"
echo "bench: bullmq paced" >&2
node bench/peers/bullmq/bench.js --redis "$redis_url" --events "$entities" --entities "$entities" \
  --window-ms 2000 --in-flight 256 --rate $((entities / 5)) --prefix "bench-bullmq-paced-$suffix" \
  >"$out/bullmq-paced.json"

# 6. Graphile Worker on the same Postgres and workload, in a database of its own (created and
# dropped by bench.js; dropped on exit here too if the run is cut short).
graphile() {
  local name=$1; shift
  local db="graphile_bench_${name//-/_}_$suffix"
  dbs+=("$db")
  echo "bench: $name" >&2
  node bench/peers/graphile/bench.js --database-url "${base_db%/*}/postgres" --database "$db" \
    --entities "$entities" --window-ms 2000 "$@" >"$out/$name.json"
}
graphile graphile-batched --mode batched --events "$events"
# One add per event is slow (a transaction and a NOTIFY each): at most 60 s of adds.
graphile graphile-single --mode single --events "$events" --max-seconds "${BENCH_GRAPHILE_SINGLE_SECONDS:-60}"
graphile graphile-paced --mode single --events "$entities" --rate $((entities / 5))

{
  echo "{\"machine\": \"$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)\","
  echo " \"redis\": \"$(redis-cli -u "$redis_url" info server | awk -F: '/redis_version/ {print $2}' | tr -d '\r')\","
  echo " \"postgres\": \"$(psql "${base_db%/*}/postgres" -Atc 'SHOW server_version')\","
  echo " \"node\": \"$(node --version)\", \"rustc\": \"$(rustc --version)\","
  echo " \"load_average\": [\"$load_start\", \"$(cut -d' ' -f1-3 /proc/loadavg)\"]}"
} >"$out/environment.json"
.local/bench-venv/bin/python bench/ingest/report.py "$out"
