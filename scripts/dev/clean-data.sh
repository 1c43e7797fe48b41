#!/usr/bin/env bash
# What `make run` leaves, removed: drops the database of QUIESCE_DATABASE_URL (default: quiesce
# on 127.0.0.1:5432) and deletes the Redis keys of the prefix QUIESCE_REDIS_PREFIX (default:
# quiesce) on QUIESCE_REDIS_URL, both key shapes: {prefix:<shard>}:... and {prefix}:....
# Stop the instance first: a running one writes its keys again. A Redis Cluster URL is refused.
set -euo pipefail
database_url=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
redis_url=${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}
prefix=${QUIESCE_REDIS_PREFIX:-quiesce}
case $redis_url in
  *cluster*) echo "clean-data: $redis_url is a cluster; delete the keys of {$prefix on each master" >&2; exit 1 ;;
esac

without_query=${database_url%%\?*}
database=${without_query##*/}
admin="${without_query%/*}/postgres"
psql "$admin" -qc "DROP DATABASE IF EXISTS \"$database\" WITH (FORCE)" >/dev/null

# SCAN's glob needs *, ?, [, ] and \ escaped.
escaped=$(sed 's/[][*?\\]/\\&/g' <<<"$prefix")
# One SCAN: the keys it found are the ones deleted and counted.
keys=$(redis-cli -u "$redis_url" --scan --pattern "{$escaped[:}]*")
if [ -n "$keys" ]; then
  xargs -r -n 500 redis-cli -u "$redis_url" del >/dev/null <<<"$keys"
fi
echo "clean-data: dropped the database $database and deleted $(grep -c . <<<"$keys") keys of the prefix $prefix"
