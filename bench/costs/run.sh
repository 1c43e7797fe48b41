#!/usr/bin/env bash
# `make bench-costs` (issue 43): an itemised cost table of an evaluation. Each patch in
# bench/costs/ takes ONE part of an evaluation's work out of the same sources (the rules' run,
# the version fence, the action, the stored snapshot, the completion's recount, the fold, the
# author's derived event, the trace context read) and breaks correctness on purpose: built
# like the ceilings (`build_variant`, .local/ceilings/bin/quiesce-cost-NAME), only ever
# measured. The 50,000-entity burst of `make bench` (2 events each, BENCH_BIG_ENTITIES, 100 a
# request, 64 connections, a 2 s window) runs on this build as it is, on the evaluation floor
# build (bench/ceilings/evaluation-floor.patch) and on each cost build, in alternating order
# over BENCH_COST_ROUNDS rounds (default 1). Around each run (from just before the load
# generator starts to just after its drain ends): the CPU seconds of the quiesce server, of
# every Postgres process, of redis-server and of the load generator (NAME.cpu.json), and, when
# the shared Postgres loads pg_stat_statements, the run database's statements
# (NAME.statements.json; this script never changes the server's configuration). The default
# rules act on no entity of this burst; BENCH_COST_RULES=<rules file> runs every build with
# other rules (bench/statements/third-hidden.toml hides a third). Prints the table
# (bench/costs/report.py) and writes bench/results-costs/. Release build; run it alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=bench/results-costs
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh
big=${BENCH_BIG_ENTITIES:-50000}
rounds=${BENCH_COST_ROUNDS:-1}
[ "$rounds" -ge 1 ] || { echo "bench-costs: BENCH_COST_ROUNDS must be at least 1" >&2; exit 1; }
rules=${BENCH_COST_RULES:-}
server_rules=() loadgen_rules=()
if [ -n "$rules" ]; then server_rules=(QUIESCE_RULES="$rules"); loadgen_rules=(--rules "$rules"); fi

echo "bench-costs: building (release)" >&2
cargo build --release --quiet --bin quiesce --bin quiesce-loadgen
build_variant evaluation-floor
costs=()
for patch in bench/costs/cost-*.patch; do
  name=$(basename "$patch" .patch)
  build_variant "$name" "$patch"
  costs+=("${name#cost-}")
done
variants=(as-is evaluation-floor "${costs[@]}")
binary() {
  case $1 in
    as-is) echo target/release/quiesce ;;
    evaluation-floor) echo "$ceilings_work/bin/quiesce-evaluation-floor" ;;
    *) echo "$ceilings_work/bin/quiesce-cost-$1" ;;
  esac
}

# Postgres' time per statement, when the server loads pg_stat_statements (it takes a restart to
# load it, which is the server's owner's to do, not this script's).
statements=0
case $(psql "${base_db%/*}/postgres" -Atc 'SHOW shared_preload_libraries') in
  *pg_stat_statements*) statements=1 ;;
  *) echo "bench-costs: pg_stat_statements is not loaded (shared_preload_libraries): no time per statement" >&2 ;;
esac
# The shared Redis' process, for its CPU (none when it is not on this machine).
redis_pid=$( (redis-cli -u "$redis_url" info server || true) | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
[ -r "/proc/${redis_pid:-0}/stat" ] || redis_pid=0

# cpu_now: the CPU clock ticks used so far by the quiesce server, by every Postgres process (the
# live ones, and the postmaster's reaped children: a backend that ends during the run is counted
# there), by redis-server, and by the machine (busy and idle), as one JSON object.
cpu_now() {
  python3 - "$server" "$redis_pid" <<'PY'
import json, os, sys
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
    return comm, int(fields[1]), [int(x) for x in fields[11:15]]
def own(pid):
    s = stat(pid)
    return s[2][0] + s[2][1] if s else 0
procs = {int(p): stat(p) for p in os.listdir("/proc") if p.isdigit()}
postgres = {pid: s for pid, s in procs.items() if s and s[0] == "postgres"}
pg = 0
for pid, (_, ppid, t) in postgres.items():
    pg += t[0] + t[1]
    if ppid not in postgres:  # the postmaster: its exited backends' time too
        pg += t[2] + t[3]
with open("/proc/stat") as f:
    cpu = [int(x) for x in f.readline().split()[1:]]
idle = cpu[3] + cpu[4]
print(json.dumps({"quiesce": own(int(sys.argv[1])), "postgres": pg,
                  "postgres_processes": len(postgres),
                  "redis": own(int(sys.argv[2])) if int(sys.argv[2]) else None,
                  "machine_busy": sum(cpu[:8]) - idle, "machine_idle": idle}))
PY
}

# The load generator through run_loadgen, with the CPU of every process around it: its own is
# its reaped time as this shell's child (nothing else ends between the two readings).
real_loadgen=$loadgen
loadgen=measured_loadgen
measured_loadgen() {
  local before after shell shell_after started ended rc=0
  before=$(cpu_now)
  # No process may start or end between these two readings but the load generator's (the
  # clock is bash's own, not `date`).
  read -r shell <"/proc/$BASHPID/stat"
  started=$EPOCHREALTIME
  "$real_loadgen" "$@" || rc=$?
  ended=$EPOCHREALTIME
  read -r shell_after <"/proc/$BASHPID/stat"
  after=$(cpu_now)
  python3 - "$before" "$after" "$shell" "$shell_after" "$started" "$ended" "$(getconf CLK_TCK)" \
    >"$out/$run.cpu.json" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
def children(stat):  # cutime + cstime of this shell (fields 16 and 17)
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[13]) + int(fields[14])
hz = int(sys.argv[7])
seconds = lambda key: None if before[key] is None else (after[key] - before[key]) / hz
busy = after["machine_busy"] - before["machine_busy"]
idle = after["machine_idle"] - before["machine_idle"]
json.dump({
    "wall_seconds": float(sys.argv[6]) - float(sys.argv[5]),
    "quiesce_cpu_seconds": seconds("quiesce"),
    "postgres_cpu_seconds": seconds("postgres"),
    "redis_cpu_seconds": seconds("redis"),
    "loadgen_cpu_seconds": (children(sys.argv[4]) - children(sys.argv[3])) / hz,
    "machine_busy_share": busy / max(busy + idle, 1),
    "postgres_processes_after": after["postgres_processes"],
}, sys.stdout)
PY
  return "$rc"
}

for round in $(seq "$rounds"); do
  if ((round % 2)); then order=("${variants[@]}"); else mapfile -t order < <(printf '%s\n' "${variants[@]}" | tac); fi
  for name in "${order[@]}"; do
    run=cost-$name-$round
    quiesce_bin=$(binary "$name") start_server "$run" QUIESCE_DEBOUNCE_WINDOW=2s QUIESCE_MAX_WAIT=60s \
      "${server_rules[@]}"
    if ((statements)); then
      psql "$DATABASE_URL_RUN" -qAtc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null
      psql "$DATABASE_URL_RUN" -qAtc "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database
                                        WHERE datname = current_database()), 0)" >/dev/null
    fi
    run_loadgen "$run" --scenario burst --events $((big * 2)) --entities "$big" --batch 100 \
      --connections 64 --window 2s --database-url "$DATABASE_URL_RUN" "${loadgen_rules[@]}"
    if ((statements)); then
      psql "$DATABASE_URL_RUN" -qAtc "
        SELECT json_build_object(
          'total_exec_time_ms', (SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements
                                 WHERE dbid = d.oid),
          'calls', (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = d.oid),
          'statements', coalesce((SELECT json_agg(s) FROM (
              SELECT calls, total_exec_time AS total_exec_time_ms,
                     mean_exec_time AS mean_exec_time_ms, rows,
                     shared_blks_hit + shared_blks_read AS shared_blks,
                     left(regexp_replace(query, '\s+', ' ', 'g'), 120) AS query
              FROM pg_stat_statements WHERE dbid = d.oid
              ORDER BY total_exec_time DESC LIMIT 15) s), '[]'))
        FROM pg_database d WHERE d.datname = current_database()" >"$out/$run.statements.json"
    fi
    stop_server
    drop_runs
  done
done
cat >"$out/costs.json" <<EOF
{"rounds": $rounds, "entities": $big, "rules": "${rules:-default}", "statements": $statements,
 "variants": [$(printf '"%s",' "${variants[@]}" | sed 's/,$//')]}
EOF
python3 bench/costs/report.py "$out" | tee "$out/table.md"
