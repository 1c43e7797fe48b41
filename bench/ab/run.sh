#!/usr/bin/env bash
# `make bench-ab BASELINE=<commit>`: what a change set costs ingest before it lands. The working
# tree (or CANDIDATE=<commit>) and the baseline commit are built in release mode and run on the
# same workload in the same run, in alternating order over AB_ROUNDS rounds (default 2), so
# that the machine's drift between runs falls on both alike. Each round, on each build: a server
# with a 2 s window (evaluations run beside ingest), the batched burst (100 events a request,
# 64 connections), then at once the single-event burst (128 connections) against the same
# server, as a platform's senders would meet it; each AB_EVENTS events (100,000) over
# AB_ENTITIES entities (10,000). With AB_PEER=1 (the default) the BullMQ peer doing the same
# work (bench/peers/bullmq/work.js: each event inserted into Postgres before its job is added)
# adds the same single-event burst once per round, for the ratio against a peer.
#
# The baseline is exported from git (`git archive`, no work tree) into .local/ab/src-<commit>
# and built with a target directory of its own (.local/ab/target, first seeded from
# target/release so that mostly quiesce itself compiles); its binary is kept as
# .local/ab/bin/quiesce-<commit> and reused. Both builds are driven by the working tree's load
# generator. Prints a markdown table (stdout) and writes every run's JSON to bench/results-ab/.
# Run it alone: a build or a suite beside it on 2 cores halves its figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

baseline=${BASELINE:?"bench-ab: set BASELINE=<commit> (the build to compare the working tree with)"}
candidate=${CANDIDATE:-}
rounds=${AB_ROUNDS:-2}
events=${AB_EVENTS:-100000}
entities=${AB_ENTITIES:-10000}
out=bench/results-ab
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh
work=.local/ab
mkdir -p "$work/bin"

# build_commit COMMIT: .local/ab/bin/quiesce-<sha> from that commit's tree, reused when present.
build_commit() {
  local sha bin src
  sha=$(git rev-parse --verify "$1^{commit}") || { echo "bench-ab: no commit $1" >&2; exit 1; }
  bin="$work/bin/quiesce-${sha:0:12}"
  if [ -x "$bin" ]; then echo "$bin"; return; fi
  src="$work/src-${sha:0:12}"
  rm -rf "$src" && mkdir -p "$src"
  git archive "$sha" | tar -x -C "$src"
  if [ ! -d "$work/target/release" ] && [ -d target/release ]; then
    mkdir -p "$work/target" && cp -a target/release "$work/target/"
  fi
  echo "bench-ab: building ${sha:0:12} (release)" >&2
  # Offline: the commit's own query data (.sqlx/) checks its SQL, whatever database is set.
  (cd "$src" && SQLX_OFFLINE=true CARGO_TARGET_DIR="$root/$work/target" \
    cargo build --release --quiet --bin quiesce >&2)
  cp "$work/target/release/quiesce" "$bin"
  rm -rf "$src"
  echo "$bin"
}

echo "bench-ab: building the working tree (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
base_bin=$(build_commit "$baseline")
if [ -n "$candidate" ]; then
  cand_bin=$(build_commit "$candidate")
  cand_name=$(git rev-parse --short=12 "$candidate")
else
  cand_bin="$work/bin/quiesce-working-tree"
  cp target/release/quiesce "$cand_bin"
  cand_name="working tree ($(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src migrations lua Cargo.toml Cargo.lock || echo ', changed'))"
fi
base_name=$(git rev-parse --short=12 "$baseline")
if [ "${AB_PEER:-1}" != 0 ]; then peer_deps bullmq; fi

run_build() {
  local label=$1 bin=$2 round=$3
  quiesce_bin=$bin start_server "ab-$label-$round" QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s
  run_loadgen "$label-$round-batched" --scenario burst --events "$events" --entities "$entities" \
    --batch 100 --connections 64 --window 2s
  run_loadgen "$label-$round-single" --scenario burst --events "$events" --entities "$entities" \
    --batch 1 --connections 128 --window 2s
  stop_server
  drop_runs
}

run_peer() {
  local round=$1 db="bullmq_ab_${round}_$suffix"
  dbs+=("$db")
  echo "bench: bullmq work, single events" >&2
  node bench/peers/bullmq/work.js --redis "$redis_url" --database-url "${base_db%/*}/postgres" \
    --database "$db" --prefix "bench-bullmq-ab-$round-$suffix" --events "$events" \
    --entities "$entities" --window-ms 2000 --batch 1 --in-flight 128 >"$out/peer-$round.json"
}

for round in $(seq "$rounds"); do
  if ((round % 2)); then order=(candidate baseline); else order=(baseline candidate); fi
  for label in "${order[@]}"; do
    if [ "$label" = candidate ]; then run_build candidate "$cand_bin" "$round"; else run_build baseline "$base_bin" "$round"; fi
  done
  if [ "${AB_PEER:-1}" != 0 ]; then run_peer "$round"; fi
done

echo "{\"baseline\": \"$base_name\", \"candidate\": \"$cand_name\", \"rounds\": $rounds, \"events\": $events, \"entities\": $entities, \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >"$out/environment.json"
python3 bench/ab/report.py "$out"
