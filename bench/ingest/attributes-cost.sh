#!/usr/bin/env bash
# Where attributes cost: the batched burst of `make bench` (100,000 events over 10,000 entities,
# 100 a request, 64 connections), four times on the same release build, each on a server and a
# database of its own: the default rules without attributes; attributes stored and declared but
# read by no rule; read without the windowed aggregates; read with them too
# (bench/ingest/attributes.toml, and two variants of it made here). Prints ingest events/s, WAL bytes per event and evaluations/s
# of each; the JSON of each run is in bench/results-attributes-cost/. Services as for `make test`
# (run it as `eval "$(scripts/dev/services.sh)"; bench/ingest/attributes-cost.sh`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=bench/results-attributes-cost
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
# The variants: the declarations and the default rules without the shadow rules that read
# attributes; and those shadow rules without their windowed aggregates.
python3 - bench/ingest/attributes.toml "$out" <<'PY'
import sys
text = open(sys.argv[1]).read()
cut = text.index('[[rule]]\nname = "spam_reports"')
open(f"{sys.argv[2]}/declared-only.toml", "w").write(text[:cut])
windowless = (text.replace(' && count_in("flag", {"reason": "spam"}, "1h") >= 3', "")
              .replace(' || max_in("flag", "score", "5m") > 0.95', ""))
assert windowless != text, "bench/ingest/attributes.toml no longer has the windowed aggregates"
open(f"{sys.argv[2]}/no-windows.toml", "w").write(windowless)
PY
one() {
  local name=$1 rules=$2
  shift 2
  start_server "$name" QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s ${rules:+QUIESCE_RULES=$rules}
  run_loadgen "$name" --scenario burst --events 100000 --entities 10000 --batch 100 \
    --connections 64 --window 2s --database-url "$DATABASE_URL_RUN" "$@"
  stop_server
}
one plain ""
one declared-only "$out/declared-only.toml" --attributes --rules "$out/declared-only.toml"
one no-windows "$out/no-windows.toml" --attributes --rules "$out/no-windows.toml"
one full bench/ingest/attributes.toml --attributes --rules bench/ingest/attributes.toml
echo "| run | ingest events/s | WAL bytes/event | evaluations/s mean | busiest second | duplicate / wrong actions |"
echo "|---|---|---|---|---|---|"
for name in plain declared-only no-windows full; do
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); dr = d["drain"]
print(f"| {sys.argv[2]} | {d['events_per_second']:,.0f} | {d['wal_bytes_per_event']:,.0f} | "
      f"{dr['evaluations_per_second_mean']:,.0f} | {dr['evaluations_per_second_peak']:,} | "
      f"{dr['duplicate_actions']} / {dr['wrong_actions']} |")
PY
done
