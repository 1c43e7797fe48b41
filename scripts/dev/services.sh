#!/usr/bin/env bash
# Makes sure Redis and Postgres are reachable for `make run` and `make test`.
#
# A QUIESCE_REDIS_URL / QUIESCE_DATABASE_URL that is set is used as given: if it does not answer,
# the script stops with an error naming the variable and the address (never replaced by another
# server). Only an unset variable falls back: the default local port if it answers, else a
# private instance from the installed server binaries under .local/ (git-ignored), installing
# Debian's packages first when they are missing and we are root.
# Prints `export ...` lines for the caller to eval; progress goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
local_dir="$root/.local"
redis_url=${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}
database_url=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
private_redis_port=${QUIESCE_PRIVATE_REDIS_PORT:-6399}
private_pg_port=${QUIESCE_PRIVATE_PG_PORT:-5499}

say() { echo "services: $*" >&2; }

# host and port of a URL such as redis://user:pw@host:port/db
host_port() {
  local rest=${1#*://}
  rest=${rest#*@}
  rest=${rest%%/*}
  rest=${rest%%\?*}
  local host=${rest%:*} port=${rest##*:}
  [ "$host" = "$rest" ] && port=$2
  echo "$host $port"
}

tcp_open() { timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

# The URL as messages show it: the password (from the first : of the userinfo to its last @, even
# one holding an unencoded / or ?) and any password parameter redacted; the user and address stay.
shown() {
  local scheme=${1%%://*} rest=${1#*://}
  case $rest in
    *@*)
      local userinfo=${rest%@*}
      case $userinfo in
        *:*) rest="${userinfo%%:*}:[REDACTED]@${rest##*@}" ;;
      esac
      ;;
  esac
  rest=$(sed -E 's/([?&](ssl)?pass(word|wd)?=)[^&#]*/\1[REDACTED]/gI' <<<"$rest")
  echo "$scheme://$rest"
}

# A variable the user set is never replaced: stop if its server does not answer.
given_unreachable() {
  say "$1 is set to $(shown "$2"), which does not answer."
  say "start that server, correct $1, or unset it to use a local or private $3."
  exit 1
}

redis_ok() {
  read -r host port < <(host_port "$1" 6379)
  if command -v redis-cli >/dev/null; then
    [ "$(timeout 3 redis-cli -u "$1" ping 2>/dev/null)" = "PONG" ]
  else
    tcp_open "$host" "$port"
  fi
}

pg_ok() {
  read -r host port < <(host_port "$1" 5432)
  if command -v pg_isready >/dev/null; then
    pg_isready -q -h "$host" -p "$port" -t 3
  else
    tcp_open "$host" "$port"
  fi
}

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }

apt_updated=
install_packages() {
  if ! can_install; then
    say "cannot find $1 and cannot install it here."
    say "install it (Debian/Ubuntu: sudo apt-get install $2), or point $3 at a running server."
    exit 1
  fi
  say "installing $2 from the distribution's packages"
  if [ -z "$apt_updated" ]; then apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}

pg_installed() {
  command -v initdb >/dev/null || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

# The chaos suite and a few tests start Redis servers of their own: they need the binary even
# when a server runs.
if [ -n "${QUIESCE_NEED_REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null; then
  install_packages redis-server redis-server QUIESCE_REDIS_URL
fi

# The chaos suite runs a worker process whose wall clock lags, under libfaketime.
libfaketime() { compgen -G "/usr/lib/*/faketime/libfaketime.so.1" | head -n 1; }
if [ -n "${QUIESCE_NEED_FAKETIME:-}" ] && [ -z "$(libfaketime)" ]; then
  install_packages libfaketime libfaketime QUIESCE_LIBFAKETIME
fi

if redis_ok "$redis_url"; then
  say "redis reachable at $(host_port "$redis_url" 6379 | tr ' ' ':')"
elif [ -n "${QUIESCE_REDIS_URL:-}" ]; then
  given_unreachable QUIESCE_REDIS_URL "$redis_url" redis
else
  command -v redis-server >/dev/null || install_packages redis-server redis-server QUIESCE_REDIS_URL
  redis_url="redis://127.0.0.1:$private_redis_port"
  if redis_ok "$redis_url"; then
    say "using the private redis on 127.0.0.1:$private_redis_port"
  else
    mkdir -p "$local_dir/redis"
    say "starting a private redis on 127.0.0.1:$private_redis_port (data in .local/redis)"
    redis-server --port "$private_redis_port" --bind 127.0.0.1 --daemonize yes \
      --dir "$local_dir/redis" --save "" --appendonly no \
      --pidfile "$local_dir/redis/redis.pid" --logfile "$local_dir/redis/redis.log" >&2
    for _ in $(seq 50); do redis_ok "$redis_url" && break; sleep 0.1; done
    redis_ok "$redis_url" || { say "redis did not start; see .local/redis/redis.log"; exit 1; }
  fi
fi

if pg_ok "$database_url"; then
  say "postgres reachable at $(host_port "$database_url" 5432 | tr ' ' ':')"
elif [ -n "${QUIESCE_DATABASE_URL:-}" ]; then
  given_unreachable QUIESCE_DATABASE_URL "$database_url" postgres
else
  pg_installed || install_packages initdb postgresql QUIESCE_DATABASE_URL
  db_name=${database_url##*/}
  db_name=${db_name%%\?*}
  database_url="postgres://postgres@127.0.0.1:$private_pg_port/${db_name:-quiesce}"
  if pg_ok "$database_url"; then
    say "using the private postgres on 127.0.0.1:$private_pg_port"
  else
    say "starting the private postgres on 127.0.0.1:$private_pg_port (data in .local/postgres)"
    mkdir -p "$local_dir"
    "$root/scripts/dev/private-postgres.sh" start "$local_dir/postgres" "$private_pg_port"
  fi
fi

echo "export QUIESCE_REDIS_URL='$redis_url'"
echo "export QUIESCE_DATABASE_URL='$database_url'"
if [ -n "${QUIESCE_NEED_FAKETIME:-}" ]; then echo "export QUIESCE_LIBFAKETIME='$(libfaketime)'"; fi
