#!/usr/bin/env bash
# A backtest over a week-sized run (make backtest-bench; figures in BENCHMARKS.md): loads a week
# of data into a scratch database, the fastest way there is (no quiesce process, no HTTP):
# time partitions of the retention's width for the past 8 days, then ENTITIES entities
# (default 200,000) with their evaluations, actions and moderators' reversals written by
# bench/backtest/data.py as CSV and loaded with psql's \copy, and EVENTS events (default
# 5,000,000) made by generate_series in Postgres. Then it times `quiesce rules backtest` (release
# build) twice with GNU time: the default rules (the identity check: nothing added or removed)
# and the default rules with a hide threshold of 12 instead of 8.3; then times `quiesce rules sweep`
# of that threshold over 10 values; prints each report, the wall time and the peak RSS, the row
# counts and the table sizes. The database is dropped on exit.
#
# quiesce_bin=target/debug/quiesce bench/backtest/run.sh times a debug build instead.
set -euo pipefail
cd "$(dirname "$0")/../.."

entities=${ENTITIES:-200000}
events=${EVENTS:-5000000}
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
db="quiesce_backtest_bench_$suffix"
database_url="${base_db%/*}/$db"
work=$(mktemp -d)

say() { echo "backtest-bench: $*" >&2; }

cleanup() {
  psql "${base_db%/*}/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${quiesce_bin:-}" ]; then
  say "building (release)"
  cargo build --release --quiet --bin quiesce
  quiesce_bin=target/release/quiesce
fi
[ -x /usr/bin/time ] || { say "GNU time (/usr/bin/time) is needed for the peak RSS; apt-get install time"; exit 1; }

export QUIESCE_DATABASE_URL="$database_url" RUST_LOG=warn
"$quiesce_bin" migrate >/dev/null

say "generating $entities entities' evaluations"
start=$(date +%s.%N)
python3 bench/backtest/data.py "$entities" "$work"
say "loading them and $events events into $db"
psql "$database_url" -q -v ON_ERROR_STOP=1 -v events="$events" -v n="$entities" >/dev/null <<SQL
-- Partitions 42 hours wide (the default retention's) back to 8 days ago, below the first one.
DO \$\$
DECLARE
    t text;
    upper timestamptz;
BEGIN
    FOREACH t IN ARRAY ARRAY['events', 'evaluations'] LOOP
        SELECT min(lower_bound) INTO upper FROM partitions WHERE parent = t;
        WHILE upper > now() - interval '8 days' LOOP
            PERFORM partition_add(t, upper - interval '42 hours', upper);
            upper := upper - interval '42 hours';
        END LOOP;
        -- And ahead, to now and a little after.
        PERFORM partitions_extend(t, interval '42 hours', interval '1 hour');
    END LOOP;
END
\$\$;
CREATE TEMP TABLE staged_actions (LIKE actions);
\copy staged_actions (id, entity, action, rule, reason, previous_status, new_status, snapshot, applied_version, dedup_key, created_at, reversed_at, reversed_by, reversal_reason) FROM '$work/actions.csv' CSV
INSERT INTO actions OVERRIDING SYSTEM VALUE SELECT * FROM staged_actions;
SELECT setval(pg_get_serial_sequence('actions', 'id'), (SELECT max(id) FROM actions));
\copy evaluations (entity, worker, started_at, finished_at, moderation_version, event_count, decisions, action_id, snapshot, due_at) FROM '$work/evaluations.csv' CSV
\copy moderator_decisions (entity, kind, action_id, moderator, reason, status, until, created_at) FROM '$work/decisions.csv' CSV
\copy entities (entity, kind, status, moderation_version, event_count, evaluated_event_count, evaluation_count, last_evaluated_at, override_status, override_until, override_by, override_reason) FROM '$work/entities.csv' NULL '' CSV
INSERT INTO events (id, entity, signal, actor, weight, priority, received_at)
SELECT 'bench-' || i, 'post:bench-' || (i % :n),
       (ARRAY['upvote', 'upvote', 'upvote', 'flag', 'report'])[1 + i % 5],
       'user:' || (i % 50000), 1, 'normal',
       now() - interval '7 days' + (i::float8 / :events) * interval '7 days'
FROM generate_series(1, :events) i;
ANALYZE;
SQL
say "loaded in $(echo "$(date +%s.%N) - $start" | bc) s"

psql "$database_url" -At <<'SQL' >&2
SELECT 'rows: ' || (SELECT count(*) FROM events) || ' events, ' || (SELECT count(*) FROM evaluations)
       || ' evaluations, ' || (SELECT count(*) FROM entities) || ' entities, '
       || (SELECT count(*) FROM actions) || ' actions, '
       || (SELECT count(*) FROM actions WHERE reversed_at IS NOT NULL) || ' reversed';
SELECT 'sizes: events ' || pg_size_pretty(sum(pg_total_relation_size(p.name::regclass))) FROM partitions p WHERE parent = 'events';
SELECT 'sizes: evaluations ' || pg_size_pretty(sum(pg_total_relation_size(p.name::regclass))) FROM partitions p WHERE parent = 'evaluations';
SELECT 'snapshot: ' || round(avg(pg_column_size(snapshot))) || ' bytes stored per evaluation on average ('
       || round(avg(octet_length(snapshot::text))) || ' bytes of JSON text)' FROM evaluations;
SQL

sed 's/weight("flag") >= 8.3/weight("flag") >= 12/' rules/default.toml >"$work/hide-at-12.toml"
for candidate in rules/default.toml "$work/hide-at-12.toml"; do
  say "backtest of $(basename "$candidate") over 7 days"
  /usr/bin/time -f 'backtest-bench: wall %e s, peak RSS %M kB, CPU %P' \
    "$quiesce_bin" rules backtest "$candidate" --since 7d --sample 3
done
say "sweep of hide_flag_pile_on's weight threshold over 7 days (10 values)"
/usr/bin/time -f 'backtest-bench: wall %e s, peak RSS %M kB, CPU %P' \
  "$quiesce_bin" rules sweep rules/default.toml --rule hide_flag_pile_on --since 7d
