#!/usr/bin/env bash
# Whether the Postgres server has the connections `make test` is about to need, asked at the
# start of the run: each test thread holds up to 10 connections at once (its app's pool of 8,
# the rules listener, the admin or migration connection: TEST_CONNECTIONS in
# tests/api/helpers/database.rs; the few tests that start a worker or serve process hold more).
#   test-connections.sh THREADS
# prints on stdout the number of test threads to run: THREADS when they fit in the connections
# free now; else as many as fit, saying so on stderr; and fails, saying what to do, when not
# even one fits or the server refuses this very connection.
set -euo pipefail
threads=$1
per_thread=10
database_url=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
admin="${database_url%%\?*}"; admin="${admin%/*}/postgres"
advice="close other clients of the server (psql sessions, a make run, another test run) or raise its max_connections"

# max_connections, the client connections open but this one, and the slots this user may not
# take (kept for superusers).
if ! figures=$(psql "$admin" -Atq -F ' ' -c "
    SELECT current_setting('max_connections')::int,
           (SELECT count(*) FROM pg_stat_activity
            WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()),
           CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN 0
                ELSE current_setting('superuser_reserved_connections')::int
                     + coalesce(nullif(current_setting('reserved_connections', true), '')::int, 0)
           END" 2>&1); then
  if grep -q "too many" <<<"$figures"; then
    echo "make test: Postgres refused the connection: too many clients ($(grep -o 'FATAL:.*' <<<"$figures" | head -1)); $advice" >&2
  else
    echo "make test: could not ask Postgres how many connections it has free: $figures" >&2
  fi
  exit 1
fi
read -r max in_use reserved <<<"$figures"
free=$((max - reserved - in_use))
need=$((threads * per_thread))
state="$in_use of max_connections $max in use"
if [ "$reserved" -gt 0 ]; then state="$state, $reserved kept for superusers"; fi
if [ "$need" -le "$free" ]; then
  echo "$threads"
  exit 0
fi
fits=$((free / per_thread))
if [ "$fits" -lt 1 ]; then
  echo "make test: Postgres has $free connections free ($state); one test thread needs up to $per_thread: $advice" >&2
  exit 1
fi
echo "make test: Postgres has $free connections free ($state); TEST_THREADS=$threads needs up to $need ($per_thread a thread): running $fits test threads instead" >&2
echo "$fits"
