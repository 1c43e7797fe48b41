#!/usr/bin/env bash
# The console's Review page with 100k automated actions in the database, and its review queue
# with 100k waiting items (make console-bench; figures in BENCHMARKS.md): loads 100,000 actions
# (over 30 days, four rules, a tenth of them reversed) and 100,000 flags no moderator has decided
# (a tenth of them claimed) into a scratch database, starts `quiesce serve` on it, signs in as a moderator, and
# times over HTTP, with curl on one kept-alive connection, the first page, a page in the middle
# and the last page of the keyset paging, and filtered first pages; then prints Postgres' plan of
# the first page. The database and the Redis prefix are dropped on exit.
#
# quiesce_bin=target/debug/quiesce bench/console/run.sh times a debug build instead of the
# release build it makes by default. RUNS (default 200) requests per figure.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${RUNS:-200}
actions=100000
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
redis_url=${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
db="quiesce_console_bench_$suffix"
database_url="${base_db%/*}/$db"
prefix="console-bench-$suffix"
source scripts/dev/free-port.sh
port=$(free_port)
work=$(mktemp -d)
server=

say() { echo "console-bench: $*" >&2; }

cleanup() {
  [ -n "$server" ] && { kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  psql "${base_db%/*}/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  redis-cli -u "$redis_url" --scan --pattern "{$prefix:*" | xargs -r redis-cli -u "$redis_url" del >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${quiesce_bin:-}" ]; then
  say "building (release)"
  cargo build --release --quiet --bin quiesce
  quiesce_bin=target/release/quiesce
fi

token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export QUIESCE_DATABASE_URL="$database_url" QUIESCE_REDIS_URL="$redis_url" QUIESCE_REDIS_PREFIX="$prefix" \
  QUIESCE_LISTEN="127.0.0.1:$port" QUIESCE_METRICS_LISTEN=off QUIESCE_INSECURE_DEV=true \
  QUIESCE_API_TOKENS="moderator:$(printf %s "$token" | sha256sum | cut -d' ' -f1)" RUST_LOG=warn
"$quiesce_bin" migrate >/dev/null

say "loading $actions actions into $db"
start=$(date +%s.%N)
psql "$database_url" -q -v ON_ERROR_STOP=1 -v n="$actions" >/dev/null <<'SQL'
-- The review queue first: 100,000 flagged entities whose flag waits, a tenth of them claimed,
-- older (lower ids) than every action Review pages through, so that its pages read what they
-- read without them.
INSERT INTO entities (entity, kind, status, moderation_version, event_count, evaluated_event_count,
                      evaluation_count, last_evaluated_at)
SELECT 'post:queue-' || i, 'post', 'flagged', 1, 3, 3, 1, now()
FROM generate_series(1, :n) i;
INSERT INTO actions (entity, action, rule, reason, previous_status, new_status, snapshot,
                     applied_version, dedup_key, created_at, review_claimed_by, review_claim_until)
SELECT 'post:queue-' || i, 'flag', CASE WHEN i % 4 = 0 THEN 'review_reports' ELSE 'review_repeated_flags' END,
       '3 flags', 'visible', 'flagged', '{}'::jsonb, 0, md5('queue' || i),
       now() - interval '31 days' - (:n - i) * interval '6 seconds',
       CASE WHEN i % 10 = 0 THEN 'Morgan' END,
       CASE WHEN i % 10 = 0 THEN now() + interval '1 day' END
FROM generate_series(1, :n) i;
INSERT INTO entities (entity, kind, status, moderation_version, event_count, evaluated_event_count,
                      evaluation_count, last_evaluated_at)
SELECT 'post:bench-' || i, 'post', CASE WHEN i % 10 = 0 THEN 'visible' ELSE 'hidden' END,
       CASE WHEN i % 10 = 0 THEN 2 ELSE 1 END, 11, 11, 1, now()
FROM generate_series(1, :n) i;
INSERT INTO actions (entity, action, rule, reason, previous_status, new_status, snapshot,
                     applied_version, dedup_key, created_at, reversed_at, reversed_by, reversal_reason)
SELECT 'post:bench-' || i, r.action, k.rule,
       (8 + i % 7) || ' flags against ' || (i % 5) || ' upvotes', 'visible', r.status,
       jsonb_build_object(
         'entity', 'post:bench-' || i, 'kind', 'post', 'status', 'visible', 'moderation_version', 0,
         'event_count', 8 + i % 7 + i % 5, 'taken_at', created,
         'override_cap', NULL, 'author', NULL,
         'signals', jsonb_build_object(
           'flag', jsonb_build_object('count', 8 + i % 7, 'weight', 8 + i % 7),
           'upvote', jsonb_build_object('count', i % 5, 'weight', i % 5))),
       0, md5('bench' || i), created,
       CASE WHEN i % 10 = 0 THEN created + interval '1 hour' END,
       CASE WHEN i % 10 = 0 THEN 'Morgan' END,
       CASE WHEN i % 10 = 0 THEN 'satire, not abuse' END
FROM generate_series(1, :n) i,
     LATERAL (SELECT now() - (:n - i) * interval '26 seconds' AS created) t,
     LATERAL (SELECT CASE WHEN i % 100 = 7 THEN 'suspend_repeat_offender'
                          WHEN i % 7 = 0 THEN 'remove_reported'
                          WHEN i % 3 = 0 THEN 'review_repeated_flags'
                          ELSE 'hide_flag_pile_on' END AS rule) k,
     LATERAL (SELECT CASE k.rule WHEN 'review_repeated_flags' THEN 'flag'
                                 WHEN 'suspend_repeat_offender' THEN 'suspend' ELSE 'hide' END AS action,
                     CASE k.rule WHEN 'review_repeated_flags' THEN 'flagged'
                                 WHEN 'suspend_repeat_offender' THEN 'suspended' ELSE 'hidden' END AS status) r;
VACUUM ANALYZE entities;
VACUUM ANALYZE actions;
SQL
say "loaded in $(echo "$(date +%s.%N) - $start" | bc) s"

"$quiesce_bin" serve >"$work/serve.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
for _ in $(seq 100); do
  curl -sf -o /dev/null "$base/healthz" && break
  sleep 0.1
done

# Sign in as a moderator: the form's cookie and CSRF token, then the form.
jar="$work/cookies"
csrf=$(curl -sf -c "$jar" "$base/console/login" | grep -o 'name="csrf" value="[^"]*"' | cut -d'"' -f4)
curl -sf -b "$jar" -c "$jar" -o /dev/null --data-urlencode "csrf=$csrf" --data-urlencode "name=bench" \
  --data-urlencode "token=$token" "$base/console/login"
curl -sf -b "$jar" -o /dev/null "$base/console/review" || { say "sign-in failed"; cat "$work/serve.log" >&2; exit 1; }

min_id=$(psql "$database_url" -Atc "SELECT min(id) FROM actions WHERE entity LIKE 'post:bench-%'")
max_id=$(psql "$database_url" -Atc "SELECT max(id) FROM actions WHERE entity LIKE 'post:bench-%'")
middle=$(( (min_id + max_id) / 2 ))
last=$(( min_id + 50 ))

# time_page NAME PATH [ROW_MARKER]: RUNS requests of PATH on one connection (after 10 to warm
# up); prints a table row with p50, p95 and max in ms, and the rows the page holds (counted by
# ROW_MARKER, default an action row's attribute).
time_page() {
  local name=$1 path=$2 marker=${3:-data-action-id=} urls=() i
  local rows
  rows=$(curl -sf -b "$jar" -H "Authorization: Bearer $token" "$base$path" | { grep -o "$marker" || true; } | wc -l)
  for i in $(seq 10); do urls+=(-o /dev/null "$base$path"); done
  curl -sf -b "$jar" -H "Authorization: Bearer $token" "${urls[@]}"
  urls=()
  for i in $(seq "$runs"); do urls+=(-o /dev/null "$base$path"); done
  curl -sf -b "$jar" -H "Authorization: Bearer $token" -w '%{time_total}\n' "${urls[@]}" | sort -n |
    awk -v name="$name" -v path="$path" -v rows="$rows" '{ t[NR] = $1 * 1000 }
      END { printf "| %s | `%s` | %d | %.1f | %.1f | %.1f |\n", name, path, rows,
            t[int(NR * 0.5)], t[int(NR * 0.95)], t[NR] }'
}

say "timing $runs requests per page"
echo
echo "| page | path | rows shown | p50 ms | p95 ms | max ms |"
echo "|---|---|---|---|---|---|"
time_page "first page" "/console/review"
time_page "middle page (about 1,000 pages in)" "/console/review?before=$middle"
time_page "last page (about 2,000 pages in)" "/console/review?before=$last"
time_page "first page, reversed only" "/console/review?reversed=reversed"
time_page "first page, a 1% rule" "/console/review?rule=suspend_repeat_offender"
time_page "first page, a filter nothing matches" "/console/review?rule=no_such_rule"
queue_first=$(psql "$database_url" -Atc "SELECT min(id) FROM actions WHERE entity LIKE 'post:queue-%'")
queue_middle=$(( queue_first + actions / 2 ))
time_page "queue, first page (100k waiting)" "/console/queue" 'data-item-id='
time_page "queue, a page in the middle" "/console/queue?after=$queue_middle" 'data-item-id='
time_page "queue, unclaimed only" "/console/queue?claimed_by=nobody" 'data-item-id='
time_page "queue, claimed by one moderator" "/console/queue?claimed_by=Morgan" 'data-item-id='
time_page "queue, a quarter's rule, waiting over an hour" "/console/queue?rule=review_reports&older_than=1h" 'data-item-id='
time_page "queue API, first page" "/v1/review" '"entity":'
time_page "queue API, claimed by nobody, 500 a page" "/v1/review?claimed=false&limit=500" '"entity":'
time_page "Quality (with the queue's figures)" "/console/quality" 'id="queue-waiting"'
echo
echo "Postgres' plans of the first and the last page (generic, as the pool plans every statement):"
psql "$database_url" -At <<'SQL' | sed 's/^/    /'
SET plan_cache_mode = force_generic_plan;
PREPARE page(text, text, text, timestamptz, bool, int8, int8) AS
  SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
         dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason
  FROM actions
  WHERE ($1::text IS NULL OR entity = $1) AND ($2::text IS NULL OR rule = $2)
    AND ($3::text IS NULL OR action = $3) AND ($4::timestamptz IS NULL OR created_at >= $4)
    AND ($5::bool IS NULL OR (reversed_at IS NOT NULL) = $5) AND id < coalesce($6::int8, 9223372036854775807)
  ORDER BY id DESC LIMIT $7;
EXPLAIN (ANALYZE, COSTS OFF) EXECUTE page(NULL, NULL, NULL, NULL, NULL, NULL, 51);
EXPLAIN (ANALYZE, COSTS OFF) EXECUTE page(NULL, NULL, NULL, NULL, NULL, 51, 51);
SQL
