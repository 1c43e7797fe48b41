#!/usr/bin/env bash
# `make retention-run`: sustained load with a short retention, to show that old events leave
# Postgres as fast as new ones arrive (DESIGN.md, invariant 8). A release `serve` (its workers
# and retention passes inside) runs with a retention of RETENTION (2m) cut into PARTITIONS (4)
# partitions and a retention pass every 5 s; test_short_retention allows a retention that
# short (a TEST ONLY setting: the server warns). The load generator sends RATE events/s
# (steady scenario, 20,000 entities, 100 events a request) for SECONDS (540; a server slower than
# RATE is given one more minute, then the load stops). The knobs are
# RETENTION_RUN_{RETENTION,PARTITIONS,RATE,SECONDS,SAMPLE}.
#
# Every SAMPLE (15) seconds: the size of the events table (pg_total_relation_size of every
# partition), its partitions, the events that came in (quiesce_events_ingested_total) and went
# out (quiesce_events_purged_total), dead rows in the events partitions, the queue lag and the
# entities the repair sweep re-scheduled. Every 30 s a probe id
# is sent, and a probe sent about RETENTION/2 earlier (inside the window, most often in an
# older partition) is sent again: it must be answered as a duplicate. At the end: the table's
# size trend once warm (after RETENTION + 2 partitions), the exact row count against in - out.
# Exits non-zero if a probe inside the window was accepted again, or if the size grew by more
# than a fifth over the warm part of the run. Figures for SCALING.md; services as for make test.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=.local/retention-run
rm -rf "$out" && mkdir -p "$out"
seconds=${RETENTION_RUN_SECONDS:-540}
rate=${RETENTION_RUN_RATE:-20000}
retention=${RETENTION_RUN_RETENTION:-2m}
partitions=${RETENTION_RUN_PARTITIONS:-4}
sample=${RETENTION_RUN_SAMPLE:-15}
# shellcheck source=bench/lib.sh
source bench/lib.sh
# Ports the kernel has free now (the bench's random pick may meet another run's ports).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
mport=$(free_port)

to_seconds() { # 2m, 90s, 1h -> seconds
  local v=$1
  case "$v" in
    *h) echo $((${v%h} * 3600)) ;; *m) echo $((${v%m} * 60)) ;; *s) echo "${v%s}" ;; *) echo "$v" ;;
  esac
}
retention_s=$(to_seconds "$retention")
width_s=$((retention_s / partitions))
warm_s=$((retention_s + 2 * width_s))

echo "retention-run: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
start_server retention QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=10s \
  QUIESCE_RETENTION="$retention" QUIESCE_TEST_SHORT_RETENTION=true \
  QUIESCE_RETENTION_PARTITIONS="$partitions" QUIESCE_RETENTION_INTERVAL=5s \
  QUIESCE_METRICS_LISTEN="127.0.0.1:$mport"
grep -q "test_short_retention is set" "$out/server-retention.log" ||
  { echo "retention-run: the server did not warn about test_short_retention" >&2; exit 1; }

psql_run() { psql "$DATABASE_URL_RUN" -qAtX -F ' ' -c "$1"; }
metric() {
  curl -fsS "http://127.0.0.1:$mport/metrics" | awk -v name="$1" '$1 == name {v = $2} END {print v + 0}'
}
# The most overdue entity of any shard (the gauge is read from Redis at scrape time).
queue_lag() {
  curl -fsS "http://127.0.0.1:$mport/metrics" |
    awk '$1 ~ /^quiesce_queue_lag_seconds[{]/ && $2 > m {m = $2} END {printf "%.1f\n", m + 0}'
}
send() { # id -> "accepted duplicates"
  curl -fsS -X POST "http://127.0.0.1:$port/v1/events" -H 'content-type: application/json' \
    -d "{\"id\":\"$1\",\"entity\":\"post:retention-probe\",\"type\":\"flag\"}" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["accepted"], r["duplicates"])'
}

run_loadgen retention --scenario steady --entities 20000 --rate "$rate" --duration "${seconds}s" \
  --events $((rate * seconds)) --batch 100 --connections 32 --window 2s &
loadgen_pid=$!
# A server slower than RATE would make the load generator send for longer: the run ends at
# SECONDS (plus a minute) whatever is left to send.
( sleep $((seconds + 60)); kill "$loadgen_pid" 2>/dev/null && echo "retention-run: load generator stopped at $((seconds + 60)) s" >&2 ) &
watchdog_pid=$!

# Probes: a new id every 30 s; the one sent about retention/2 before is sent again.
(
  n=0
  back=$(((retention_s / 2 + 29) / 30))
  declare -a sent_at
  while kill -0 "$loadgen_pid" 2>/dev/null; do
    id="retention-probe-$n"
    sent_at[$n]=$(date +%s)
    echo "$(date +%s) first $id $(send "$id")" >>"$out/probes.txt"
    old=$((n - back))
    if [ "$old" -ge 0 ]; then
      age=$(($(date +%s) - sent_at[$old]))
      echo "$(date +%s) again retention-probe-$old age=${age}s $(send "retention-probe-$old")" >>"$out/probes.txt"
    fi
    n=$((n + 1))
    sleep 30
  done
) &
probes_pid=$!

size_sql="SELECT coalesce(sum(pg_total_relation_size(relid)), 0), count(*)
          FROM pg_partition_tree('events') WHERE isleaf"
dead_sql="SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
          WHERE relid IN (SELECT relid FROM pg_partition_tree('events') WHERE isleaf)"
other_sql="SELECT (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('evaluations') WHERE isleaf),
                  (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('signal_buckets') WHERE isleaf)"
echo "t_s events_bytes partitions in_total out_total dead_rows evaluations_bytes buckets_bytes queue_lag_s sweep_repaired" >"$out/samples.txt"
start=$(date +%s)
while kill -0 "$loadgen_pid" 2>/dev/null; do
  t=$(($(date +%s) - start))
  read -r bytes parts < <(psql_run "$size_sql")
  echo "$t $bytes $parts $(metric quiesce_events_ingested_total) $(metric quiesce_events_purged_total) $(psql_run "$dead_sql") $(psql_run "$other_sql") $(queue_lag) $(metric quiesce_sweep_repaired_total)" >>"$out/samples.txt"
  sleep "$sample"
done
wait "$loadgen_pid" || true
kill "$probes_pid" "$watchdog_pid" 2>/dev/null || true
wait "$probes_pid" 2>/dev/null || true

rows=$(psql_run "SELECT count(*) FROM events")
in_total=$(metric quiesce_events_ingested_total)
out_total=$(metric quiesce_events_purged_total)
python3 - "$out/retention.json" <<'EOF' >"$out/report.json"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print('"no report: stopped before it sent everything"')
else:
    print(json.dumps({k: r[k] for k in ("events_sent", "events_accepted", "duplicates",
                                         "send_seconds", "events_per_second", "errors_by_status")}))
EOF
cat "$out/samples.txt"
cat "$out/probes.txt"
echo "retention-run: loadgen $(cat "$out/report.json")"
echo "retention-run: rows now $rows; in $in_total - out $out_total = $((in_total - out_total)) (out counted by ANALYZE per dropped partition)"

status=0
bad=$(awk '$2 == "again" && $5 != "0" {n++} END {print n + 0}' "$out/probes.txt")
agains=$(awk '$2 == "again" {n++} END {print n + 0}' "$out/probes.txt")
if [ "$bad" -gt 0 ] || [ "$agains" -eq 0 ]; then
  echo "retention-run: $bad of $agains probes re-sent inside the window were accepted again" >&2
  status=1
else
  echo "retention-run: all $agains probes re-sent inside the window were duplicates"
fi
# The trend once warm: least-squares slope of the size, over the warm span, against its mean.
awk -v warm="$warm_s" 'NR > 1 && $1 >= warm {n++; x += $1; y += $2; xx += $1 * $1; xy += $1 * $2;
    if (n == 1) first = $1; last = $1; if ($2 > max) max = $2}
  END {
    if (n < 3) {print "retention-run: too few warm samples"; exit 1}
    slope = (n * xy - x * y) / (n * xx - x * x); mean = y / n
    growth = slope * (last - first) / mean
    printf "retention-run: warm from %d s: %d samples, mean %.1f MB, max %.1f MB, trend %+.1f%% over %d s\n",
      warm, n, mean / 1e6, max / 1e6, growth * 100, last - first
    exit (growth > 0.2) ? 1 : 0
  }' "$out/samples.txt" || status=1
exit "$status"
