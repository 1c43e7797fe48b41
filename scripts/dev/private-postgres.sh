#!/usr/bin/env bash
# A Postgres server of the project's own, in a folder: `make run`/`make test` use one under
# .local/ when none is reachable, and the chaos suite restarts one mid-run.
#
#   private-postgres.sh start DIR PORT     initialise DIR on first use, then start on 127.0.0.1:PORT
#   private-postgres.sh stop DIR [MODE]    stop it; MODE fast (default) or immediate (a crash)
#
# Postgres refuses to run as root: as root, the server runs as the postgres system user.
set -euo pipefail

pg_bin() {
  local candidate
  for candidate in "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/x)")" /usr/lib/postgresql/*/bin; do
    if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then echo "$candidate"; return 0; fi
  done
  echo "private-postgres: no initdb/pg_ctl found; install the postgresql package" >&2
  return 1
}

command=${1:?usage: private-postgres.sh start DIR PORT | stop DIR [fast|immediate]}
data=${2:?the data folder}
bin=$(pg_bin)
run_as=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  run_as=(runuser -u postgres --)
fi

case "$command" in
  start)
    port=${3:?the port}
    if [ ! -f "$data/PG_VERSION" ]; then
      mkdir -p "$data"
      [ "$(id -u)" = 0 ] && chown postgres "$data"
      "${run_as[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
    fi
    "${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
      -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c max_connections=300" start >&2
    ;;
  stop)
    "${run_as[@]}" "$bin/pg_ctl" -D "$data" -m "${3:-fast}" -w stop >&2
    ;;
  *)
    echo "private-postgres: unknown command $command" >&2
    exit 2
    ;;
esac
