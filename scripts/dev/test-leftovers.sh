#!/usr/bin/env bash
# What the test suite leaves on the shared servers: Redis keys of the test and smoke prefixes
# ({test-..., {smoke-...) and the databases quiesce_test_* and quiesce_smoke_*.
#   test-leftovers.sh list        prints them, one per line
#   test-leftovers.sh since FILE  fails, naming them, if any is not in FILE (an earlier list):
#                                 `make test` takes a list before the run and checks after it,
#                                 so what an interrupted earlier run left does not fail this one
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
                         WHERE datname LIKE 'quiesce\_test\_%' OR datname LIKE 'quiesce\_smoke\_%'"
  } | sort
}

case ${1:-} in
  list) list ;;
  since)
    left=$(comm -13 "$2" <(list))
    if [ -n "$left" ]; then
      echo "test-leftovers: the run left $(wc -l <<<"$left") keys or databases behind:" >&2
      head -20 <<<"$left" >&2
      echo "leftovers: 0 passed, 1 failed"
      exit 1
    fi
    echo "leftovers: no test database or key left behind"
    ;;
  *) echo "usage: $0 list | since FILE" >&2; exit 2 ;;
esac
