#!/usr/bin/env bash
# What the test suite leaves on the shared servers: Redis keys of the test and smoke prefixes
# ({test-..., {smoke-...), the databases quiesce_test_* and quiesce_smoke_*, and the roles
# quiesce_test_* (tests/api/harness.rs makes one).
#   test-leftovers.sh list        prints them, one per line
#   test-leftovers.sh since FILE  fails, naming them, if any is not in FILE (an earlier list):
#                                 `make test` takes a list before the run and checks after it,
#                                 whether the tests passed or not. What FILE names and is still
#                                 there is reported as an earlier run's, without failing this
#                                 one, and listed in FILE.earlier for the command below
#   test-leftovers.sh drop FILE   drops the databases and roles and deletes the keys that FILE
#                                 names (lines as `list` prints them). Only while no other test
#                                 run uses the servers: a run in progress has names like these
set -euo pipefail
export LC_ALL=C
redis_url=${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}
database_url=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
admin="${database_url%%\?*}"; admin="${admin%/*}/postgres"

list() {
  {
    for pattern in '{test-*' '{smoke-*'; do
      redis-cli -u "$redis_url" --scan --pattern "$pattern" | sed 's/^/redis key /'
    done
    psql "$admin" -Atqc "SELECT 'database ' || datname FROM pg_database
                         WHERE datname LIKE 'quiesce\_test\_%' OR datname LIKE 'quiesce\_smoke\_%'
                         UNION ALL
                         SELECT 'role ' || rolname FROM pg_roles WHERE rolname LIKE 'quiesce\_test\_%'"
  } | sort
}

# "N databases, N roles, N keys under N prefixes" of a list on stdin.
summary() {
  awk '
    $1 == "database" { databases++ }
    $1 == "role" { roles++ }
    $1 == "redis" { keys++; match($3, /^\{[a-z]+-[0-9a-f]+/); prefixes[substr($3, 2, RLENGTH - 1)] = 1 }
    END {
      n = 0; for (p in prefixes) n++
      printf "%d databases, %d roles, %d keys under %d prefixes", databases, roles, keys, n
    }'
}

# The databases and roles, and each key prefix once, of a list on stdin (the first 10).
names() {
  sed -E 's/^redis key \{([a-z]+-[0-9a-f]+).*/redis prefix \1/' | uniq | head -10
}

case ${1:-} in
  list) list ;;
  since)
    now=$(list)
    earlier=$(comm -12 "$2" <(cat <<<"$now") | sed '/^$/d')
    if [ -n "$earlier" ]; then
      cat <<<"$earlier" >"$2.earlier"
      {
        echo "test-leftovers: $(summary <<<"$earlier") were there before this run began:"
        echo "  left by an earlier run that did not finish its clean-up (or made by a run going on beside this one):"
        names <<<"$earlier" | sed 's/^/    /'
        echo "  they do not fail this run. Drop them, when no other test run uses these servers, with:"
        echo "    scripts/dev/test-leftovers.sh drop $2.earlier"
      } >&2
    fi
    left=$(comm -13 "$2" <(cat <<<"$now") | sed '/^$/d')
    if [ -n "$left" ]; then
      echo "test-leftovers: the run left $(summary <<<"$left") behind:" >&2
      names <<<"$left" | sed 's/^/  /' >&2
      echo "leftovers: 0 passed, 1 failed"
      exit 1
    fi
    echo "leftovers: no test database or key left behind"
    ;;
  drop)
    sed -n 's/^database //p' "$2" | while read -r name; do
      psql "$admin" -qc "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null
    done
    sed -n 's/^role //p' "$2" | while read -r name; do
      psql "$admin" -qc "DROP ROLE IF EXISTS \"$name\"" >/dev/null
    done
    sed -n 's/^redis key //p' "$2" | xargs -r -d '\n' -n 100 redis-cli -u "$redis_url" UNLINK >/dev/null
    echo "test-leftovers: dropped $(summary <"$2")"
    ;;
  *) echo "usage: $0 list | since FILE | drop FILE" >&2; exit 2 ;;
esac
