#!/usr/bin/env bash
# `make soak`: steady load and nobody scraping /metrics. A `serve` (with its workers) and a
# separate `worker` process share one database and Redis prefix, both with the metrics listener
# off (they record all the same). First a closed-loop probe (as fast as the server takes them,
# SOAK_PROBE_EVENTS events) measures the rate this machine sustains (the mean of its second
# half); then the load generator
# sends SOAK_SHARE of that rate (default 0.8; SOAK_RATE sets a rate instead and skips the probe)
# for SOAK_SECONDS. During the paced run the RSS of both processes is sampled every 10 s and
# Postgres' waits (pg_stat_activity: every backend of the run's database that waits, on what,
# and behind which statements) every 250 ms. The report: memory in the second half (it must
# stay flat: recorded samples are folded by the recorder's upkeep, not kept for a scrape that
# never comes), the ingest requests' latency p50 / p99 / max and their errors, and what the
# slow statements waited on. Figures for RELIABILITY.md; release build; services as for
# `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=.local/soak
rm -rf "$out" && mkdir -p "$out"
seconds=${SOAK_SECONDS:-180}
share=${SOAK_SHARE:-0.8}
rate=${SOAK_RATE:-}
probe_events=${SOAK_PROBE_EVENTS:-1000000}
# shellcheck source=bench/lib.sh
source bench/lib.sh
load=(--scenario steady --entities 20000 --batch 50 --connections 16 --window 2s)

echo "soak: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start_server soak QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=10s
env QUIESCE_DATABASE_URL="$DATABASE_URL_RUN" QUIESCE_REDIS_URL="$redis_url" \
  QUIESCE_REDIS_PREFIX="$REDIS_PREFIX_RUN" QUIESCE_METRICS_LISTEN=off QUIESCE_WORKER_ID=soak-worker \
  RUST_LOG=warn "$quiesce_bin" worker >"$out/worker.log" 2>&1 &
worker=$!
waits=
trap '[ -n "$waits" ] && kill "$waits" 2>/dev/null; kill -TERM "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true; cleanup' EXIT

if [ -z "$rate" ]; then
  run_loadgen soak-probe "${load[@]}" --events "$probe_events"
  # Its second half: the first seconds run on small tables and no backlog of evaluations.
  sustained=$(python3 -c 'import json, sys
seconds = json.load(open(sys.argv[1]))["accepted_per_second"][:-1]
half = seconds[len(seconds) // 2:] or seconds
print(round(sum(half) / max(len(half), 1)))' "$out/soak-probe.json")
  rate=$(python3 -c "print(max(1, round($sustained * $share)))")
  echo "soak: closed loop sustained $sustained events/s; pacing at $share of it: $rate events/s" >&2
else
  sustained=
fi

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
echo "seconds serve_kb worker_kb" >"$out/rss.txt"
(
  for ((t = 0; t <= seconds; t += 10)); do
    echo "$t $(rss "$server") $(rss "$worker")" >>"$out/rss.txt"
    sleep 10
  done
) &
sampler=$!
# Every backend of the run's database that waits (a lock, I/O, a client...), with how long its
# statement has run, the statement's start, and the statements of the backends blocking it.
db_name=${DATABASE_URL_RUN##*/}
psql "${base_db%/*}/postgres" -qAtX -F $'\t' >"$out/waits.tsv" 2>"$out/waits.err" <<SQL &
SELECT clock_timestamp(), a.pid, a.wait_event_type, a.wait_event,
       round(extract(epoch FROM clock_timestamp() - a.query_start) * 1000),
       left(regexp_replace(a.query, '\s+', ' ', 'g'), 60),
       coalesce((SELECT string_agg(b.pid || ':' || left(regexp_replace(b.query, '\s+', ' ', 'g'), 60)
                                   || ' [' || coalesce(b.wait_event, b.state) || ']', ' | ')
                 FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(a.pid))), '')
FROM pg_stat_activity a
WHERE a.datname = '$db_name' AND a.state = 'active' AND a.wait_event_type IS NOT NULL
  AND a.wait_event_type <> 'Client' AND a.pid <> pg_backend_pid()
\watch 0.25
SQL
waits=$!
run_loadgen soak "${load[@]}" --rate "$rate" --duration "${seconds}s" --events $((rate * seconds))
kill "$waits" 2>/dev/null || true
waits=
wait "$sampler" || true
cat "$out/rss.txt"
{
  echo "{\"machine\": \"$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)\","
  echo " \"load\": \"$load_before / $(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"seconds\": $seconds, \"share\": $share, \"rate\": $rate, \"sustained\": ${sustained:-null}}"
} >"$out/environment.json"
python3 bench/soak/report.py "$out" | tee "$out/report.md"
