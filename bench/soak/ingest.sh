#!/usr/bin/env bash
# `make soak-ingest` (and the last step of `make bench`): does ingest keep its pace while the
# tables fill and evaluations run beside it? A closed loop (as fast as the server answers) of
# SOAK_INGEST_SENDERS senders (6), each request SOAK_INGEST_BATCH events (50) of entities drawn
# at random from SOAK_INGEST_ENTITIES (20,000; `quiesce-loadgen --scenario random`), for
# SOAK_INGEST_SECONDS (600), against one `serve` with a 2 s window, so that evaluations run all
# along. The server's RSS is sampled every 10 s. Prints the rate of each minute, the second
# minute's and the last minute's (the target: the last at least 90% of the second), and the RSS
# at the start of the second minute and at the end. Writes .local/soak-ingest/. Release build;
# services as for `make test`. Run it alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=.local/soak-ingest
rm -rf "$out" && mkdir -p "$out"
seconds=${SOAK_INGEST_SECONDS:-600}
senders=${SOAK_INGEST_SENDERS:-6}
batch=${SOAK_INGEST_BATCH:-50}
entities=${SOAK_INGEST_ENTITIES:-20000}
((seconds >= 180)) || { echo "soak-ingest: SOAK_INGEST_SECONDS must be at least 180 (three minutes to compare)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
source bench/lib.sh

echo "soak-ingest: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
start_server soak-ingest QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=10s

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "seconds serve_kb" >"$out/rss.txt"
(
  for ((t = 0; t <= seconds; t += 10)); do
    echo "$t $(rss "$server")" >>"$out/rss.txt"
    sleep 10
  done
) &
sampler=$!
# Enough events that the duration ends the run, not the count (100k/s would be far past this
# machine's rate).
run_loadgen soak-ingest --scenario random --entities "$entities" --batch "$batch" \
  --connections "$senders" --window 2s --duration "${seconds}s" --events $((seconds * 100000))
wait "$sampler" || true
echo "{\"seconds\": $seconds, \"senders\": $senders, \"batch\": $batch, \"entities\": $entities, \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >"$out/environment.json"
python3 bench/soak/ingest_report.py "$out" | tee "$out/report.md"
