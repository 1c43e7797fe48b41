#!/usr/bin/env bash
# `make ceilings`: how fast ingest would go with parts of its work taken out. Each patch in
# bench/ceilings/ removes one part (the HTTP handler answers without writing; no counters; no
# signal counters; no minute buckets) and breaks correctness on purpose: the builds live under
# .local/ceilings/ and are only ever measured, never shipped. The working tree as it is, then
# each patch applied to a copy of it, run the batched and the one-event-per-request ingest
# runs of `make bench` (ingest only: a 60 s window, so no evaluation competes), ROUNDS times
# in alternating order; BullMQ's add rate from the same machine is printed for the ratios.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

# shellcheck source=bench/lib.sh
source bench/lib.sh
work=$ceilings_work
out=$work/results
rm -rf "$out" && mkdir -p "$out" "$work/bin"
events=${CEILINGS_EVENTS:-200000}
entities=${CEILINGS_ENTITIES:-10000}
rounds=${CEILINGS_ROUNDS:-2}
[ "$rounds" -ge 1 ] || { echo "ceilings: CEILINGS_ROUNDS must be at least 1" >&2; exit 1; }

echo "ceilings: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
cp target/release/quiesce "$work/bin/quiesce-as-is"
variants=(as-is)
for patch in bench/ceilings/*.patch; do
  name=$(basename "$patch" .patch)
  # The evaluation floor is measured by `make bench` (bench/ingest/run.sh), the statements' cost
  # by `make bench-statements` (bench/statements/run.sh), not on ingest.
  [[ $name == evaluation-* || $name == no-statements ]] && continue
  build_variant "$name"
  variants+=("$name")
done
peer_deps bullmq

for round in $(seq "$rounds"); do
  if ((round % 2)); then order=("${variants[@]}"); else mapfile -t order < <(printf '%s\n' "${variants[@]}" | tac); fi
  for name in "${order[@]}"; do
    quiesce_bin="$work/bin/quiesce-$name" ingest_only "$name-$round" "$events" $((events / 2))
  done
done
echo "ceilings: bullmq" >&2
node bench/peers/bullmq/bench.js --redis "$redis_url" --events 100000 --entities "$entities" \
  --window-ms 2000 --in-flight 256 --prefix "bench-ceilings-bullmq-$suffix" >"$out/bullmq.json"

python3 - "$out" "$rounds" "${variants[@]}" <<'PY'
import json, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
bull = json.load(open(f"{out}/bullmq.json"))["adds_per_second"]
def reports(name, run):
    reports = [json.load(open(f"{out}/{name}-{r}-{run}.json")) for r in range(1, rounds + 1)]
    for report in reports:
        # A build that answered errors would only show a lower rate: refuse the figure.
        if report["errors_by_status"]:
            sys.exit(f"ceilings: {name} {run} answered errors: {report['errors_by_status']}")
    return reports
print(f"BullMQ adds/s in this run: {bull:,.0f}\n")
print("| variant | batched events/s (each round) | x BullMQ | WAL bytes/event | one event per request, events/s | x BullMQ |")
print("|---|---|---|---|---|---|")
for name in variants:
    batched, single = reports(name, "batched"), reports(name, "single")
    b, s = [r["events_per_second"] for r in batched], [r["events_per_second"] for r in single]
    # The whole server's WAL: the lowest round is the one least disturbed by other writers.
    wal = min(r["wal_bytes_per_event"] for r in batched)
    fmt = lambda xs: " / ".join(f"{x:,.0f}" for x in xs)
    print(f"| {name} | {fmt(b)} | {max(b) / bull:.2f} | {wal:,.0f} | {fmt(s)} | {max(s) / bull:.2f} |")
PY
