#!/usr/bin/env bash
# `make bench-statements`: what statements of reasons cost evaluations (issue 42: at most 5%).
# The 50,000-entity burst of `make bench` (2 events each, BENCH_BIG_ENTITIES) on this build and
# on the no-statements build (bench/ceilings/no-statements.patch: the same sources, no statement
# drafted or written), in alternating order over BENCH_STATEMENT_ROUNDS rounds (default 2), with
# the default rules (few evaluations act) and with bench/statements/third-hidden.toml (a third
# of the entities hidden, each with a statement). Prints the mean evaluations/s of each and
# their ratio; JSON reports in bench/results-statements/. Release build; run it alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results-statements
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh
big=${BENCH_BIG_ENTITIES:-50000}
rounds=${BENCH_STATEMENT_ROUNDS:-2}

echo "bench-statements: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
build_variant no-statements
mkdir -p "$ceilings_work/bin" && cp target/release/quiesce "$ceilings_work/bin/quiesce-as-is"

third=bench/statements/third-hidden.toml
variants=(as-is no-statements)
for round in $(seq "$rounds"); do
  if ((round % 2)); then order=("${variants[@]}"); else order=(no-statements as-is); fi
  for name in "${order[@]}"; do
    for rules in default third; do
      extra=() settings=()
      if [ "$rules" = third ]; then extra=(--rules "$third"); settings=(QUIESCE_RULES="$third"); fi
      quiesce_bin="$ceilings_work/bin/quiesce-$name" start_server "$name-$rules-$round" \
        QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s "${settings[@]}"
      run_loadgen "$name-$rules-$round" --scenario burst --events $((big * 2)) --entities "$big" \
        --batch 100 --connections 64 --window 2s --database-url "$DATABASE_URL_RUN" "${extra[@]}"
      psql "$DATABASE_URL_RUN" -Atc "SELECT count(*) FROM statements" >"$out/$name-$rules-$round.statements"
      stop_server
      drop_runs
    done
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| rules | build | evaluations/s, mean (each round) | actions | statements | duplicate / wrong actions |")
print("|---|---|---|---|---|---|")
means = {}
for rules in ("default", "third"):
    for name in ("as-is", "no-statements"):
        reports = [json.load(open(f"{out}/{name}-{rules}-{r}.json")) for r in range(1, rounds + 1)]
        drains = [r["drain"] for r in reports]
        rates = [d["evaluations_per_second_mean"] for d in drains]
        statements = [int(open(f"{out}/{name}-{rules}-{r}.statements").read()) for r in range(1, rounds + 1)]
        means[(rules, name)] = sum(rates) / len(rates)
        label = "default" if rules == "default" else "a third hidden"
        print(f"| {label} | {name} | {means[(rules, name)]:,.0f} ({', '.join(f'{x:,.0f}' for x in rates)}) "
              f"| {', '.join(str(d['actions']) for d in drains)} | {', '.join(map(str, statements))} "
              f"| {sum(d['duplicate_actions'] for d in drains)} / {sum(d['wrong_actions'] for d in drains)} |")
print()
for rules in ("default", "third"):
    ratio = means[(rules, "as-is")] / means[(rules, "no-statements")]
    label = "default rules" if rules == "default" else "a third hidden"
    print(f"{label}: with statements {ratio:.3f} x the rate without ({(1 - ratio) * 100:+.1f}% cost)")
PY
