#!/usr/bin/env bash
# `make ceilings`: how fast ingest would go with parts of its work taken out. Each patch in
# bench/ceilings/ removes one part (the HTTP handler answers without writing; no counters; no
# signal counters; no minute buckets) and breaks correctness on purpose: the builds live under
# .local/ceilings/ and are only ever measured, never shipped. The working tree as it is, then
# each patch applied to a copy of it, run the batched and the one-event-per-request ingest
# runs of `make bench` (ingest only: a 60 s window, so no evaluation competes), ROUNDS times
# in alternating order; BullMQ's add rate from the same machine is printed for the ratios.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

work=.local/ceilings
out=$work/results
rm -rf "$out" && mkdir -p "$out" "$work/bin"
events=${CEILINGS_EVENTS:-200000}
entities=${CEILINGS_ENTITIES:-10000}
rounds=${CEILINGS_ROUNDS:-2}
[ "$rounds" -ge 1 ] || { echo "ceilings: CEILINGS_ROUNDS must be at least 1" >&2; exit 1; }
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

echo "ceilings: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
cp target/release/quiesce "$work/bin/quiesce-as-is"
variants=(as-is)
for patch in bench/ceilings/*.patch; do
  name=$(basename "$patch" .patch)
  copy="$work/src-$name"
  rm -rf "$copy" && mkdir -p "$copy"
  git ls-files -z | xargs -0 cp --parents -t "$copy"
  # Exact hunks only (no fuzz, no questions): a patch that no longer fits is an error.
  (cd "$copy" && patch -p1 --batch --fuzz=0 --quiet <"$root/$patch") ||
    { echo "ceilings: $patch no longer applies" >&2; exit 1; }
  echo "ceilings: building $name" >&2
  (cd "$copy" && CARGO_TARGET_DIR="$root/$work/target" cargo build --release --quiet --bin quiesce)
  cp "$work/target/release/quiesce" "$work/bin/quiesce-$name"
  variants+=("$name")
done
bullmq_deps

measure() {
  local name=$1 round=$2
  quiesce_bin="$work/bin/quiesce-$name"
  start_server "$name-$round" QUIESCE_DEBOUNCE_WINDOW=60s QUIESCE_MAX_WAIT=120s
  run_loadgen "$name-$round-batched" --scenario burst --events "$events" --entities "$entities" \
    --batch 100 --connections 64
  run_loadgen "$name-$round-single" --scenario burst --events $((events / 2)) \
    --entities "$entities" --batch 1 --connections 128
  stop_server
  # The next run does not share Postgres and Redis with this one's leftover data.
  drop_runs
}
for round in $(seq "$rounds"); do
  if ((round % 2)); then order=("${variants[@]}"); else mapfile -t order < <(printf '%s\n' "${variants[@]}" | tac); fi
  for name in "${order[@]}"; do measure "$name" "$round"; done
done
echo "ceilings: bullmq" >&2
node bench/peers/bullmq/bench.js --redis "$redis_url" --events 100000 --entities "$entities" \
  --window-ms 2000 --in-flight 256 --prefix "bench-ceilings-bullmq-$suffix" >"$out/bullmq.json"

python3 - "$out" "$rounds" "${variants[@]}" <<'PY'
import json, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
bull = json.load(open(f"{out}/bullmq.json"))["adds_per_second"]
def rates(name, run):
    reports = [json.load(open(f"{out}/{name}-{r}-{run}.json")) for r in range(1, rounds + 1)]
    for report in reports:
        # A build that answered errors would only show a lower rate: refuse the figure.
        if report["errors_by_status"]:
            sys.exit(f"ceilings: {name} {run} answered errors: {report['errors_by_status']}")
    return [report["events_per_second"] for report in reports]
print(f"BullMQ adds/s in this run: {bull:,.0f}\n")
print("| variant | batched events/s (each round) | x BullMQ | one event per request, events/s | x BullMQ |")
print("|---|---|---|---|---|")
for name in variants:
    b, s = rates(name, "batched"), rates(name, "single")
    fmt = lambda xs: " / ".join(f"{x:,.0f}" for x in xs)
    print(f"| {name} | {fmt(b)} | {max(b) / bull:.2f} | {fmt(s)} | {max(s) / bull:.2f} |")
PY
