#!/usr/bin/env bash
# The work peers on one burst: BullMQ (bullmq/work.js) and Graphile Worker (graphile/work.js),
# each job doing what a platform writes to get quiesce's decision (decide.mjs), one after the
# other on the shared Redis and Postgres. Prints a markdown table of their figures on stdout
# (progress on stderr) and writes each peer's JSON line to OUT/peers-work-{bullmq,graphile}.json.
# Fire delay is a job's completion minus its entity's last add plus the window; "from job start"
# is the same from the job's start, as quiesce records an evaluation's delay.
#
#   bench/peers/work.sh [EVENTS [ENTITIES [OUT]]]     default: 100000 50000 bench/results
#
# The burst is `quiesce-loadgen --scenario burst --events EVENTS --entities ENTITIES` (seed 1):
# the same entity and type for every event, so the actions compare with quiesce's. Window 2 s
# (PEERS_WINDOW_MS). Extra options for one peer: PEERS_BULLMQ_ARGS, PEERS_GRAPHILE_ARGS (e.g.
# "--concurrency 64 --pool 16"); the settings and their sources: bench/peers/SETTINGS.md. Each
# peer's database and Redis prefix are its own, dropped by the peer (and on exit here, should a
# run be cut short). Services as for `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

events=${1:-100000}
entities=${2:-50000}
out=${3:-bench/results}
window=${PEERS_WINDOW_MS:-2000}
mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh
peer_deps bullmq
peer_deps graphile

bullmq_db="bullmq_work_$suffix"
graphile_db="graphile_work_$suffix"
bullmq_prefix="bench-bullmq-work-$suffix"
dbs+=("$bullmq_db" "$graphile_db")
# BullMQ's keys have no hash tag, so lib.sh's delete_prefix would not find them.
drop_bullmq_keys() {
  redis-cli -u "$redis_url" --scan --pattern "$bullmq_prefix:*" | xargs -r redis-cli -u "$redis_url" del >/dev/null || true
}
trap 'cleanup; drop_bullmq_keys' EXIT

echo "peers: bullmq work, $events events over $entities entities" >&2
# shellcheck disable=SC2086 # the extra options are words on purpose
node bench/peers/bullmq/work.js --redis "$redis_url" --database-url "${base_db%/*}/postgres" \
  --database "$bullmq_db" --prefix "$bullmq_prefix" --events "$events" --entities "$entities" \
  --window-ms "$window" ${PEERS_BULLMQ_ARGS:-} >"$out/peers-work-bullmq.json"
echo "peers: graphile work, $events events over $entities entities" >&2
# shellcheck disable=SC2086
node bench/peers/graphile/work.js --database-url "${base_db%/*}/postgres" --database "$graphile_db" \
  --events "$events" --entities "$entities" --window-ms "$window" ${PEERS_GRAPHILE_ARGS:-} \
  >"$out/peers-work-graphile.json"

python3 - "$out/peers-work-bullmq.json" "$out/peers-work-graphile.json" <<'PY'
import json, sys

def settings(run):
    s = run["settings"]
    if run["peer"].startswith("bullmq"):
        return f'concurrency {s["concurrency"]}, pool {s["pool"]}'
    return (f'concurrency {s["concurrentJobs"]}, pool {s["maxPoolSize"]}, '
            f'local queue {s["localQueue"]["size"]}')

def ms(value):
    return "-" if value is None else f"{value / 1000:.2f} s"

runs = [json.load(open(path)) for path in sys.argv[1:]]
first = runs[0]
print(f'Work peers: {first["events"]:,} events over {first["entities"]:,} entities, '
      f'window {first["window_ms"]} ms, seed {first["seed"]}\n')
print("| peer | settings | adds/s | evaluations/s, mean | busiest second | fire delay p50 / p99 / max "
      "| p99 from job start | jobs per entity | actions (expected) | duplicate | wrong "
      "| not evaluated after last event |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for run in runs:
    delay = run["fire_delay_ms"]
    print(f'| {run["peer"]} | {settings(run)} | {run["adds_per_second"]:,.0f} '
          f'| {run["evaluations_per_second_mean"]:,.0f} | {run["evaluations_per_second_peak"]:,} '
          f'| {ms(delay["p50"])} / {ms(delay["p99"])} / {ms(delay["max"])} '
          f'| {ms(run["fire_delay_at_start_ms"]["p99"])} '
          f'| {run["jobs_per_entity"]:.2f} | {run["actions"]:,} ({run["expected_actions"]:,}) '
          f'| {run["duplicate_actions"]} | {run["wrong_actions"]} | {run["entities_not_covered"]} |')
PY
