#!/usr/bin/env bash
# A point-in-time restore, drilled (`make ha` runs it in tests/ha/restore.rs; docs/operations.md,
# "Restoring Postgres", is the runbook it follows). PostgreSQL's own tools: WAL archiving
# (`archive_command`), a base backup (`pg_basebackup`), and a restore of that backup replaying
# the archive up to a chosen instant (`restore_command`, `recovery_target_time`). pgBackRest or
# WAL-G do the same steps with retention, compression and verification on top.
#
#   scripts/dev/restore-drill.sh start            a private Postgres that archives its WAL; prints
#                                                 its base URL (postgres://postgres@127.0.0.1:PORT)
#   scripts/dev/restore-drill.sh backup           a base backup of it (pg_basebackup, fast checkpoint)
#   scripts/dev/restore-drill.sh archive          switch to a new WAL segment and wait until the
#                                                 last one is archived (what a restore can reach)
#   scripts/dev/restore-drill.sh restore TIME     the backup restored to TIME (any timestamptz
#                                                 Postgres reads) and promoted, on the next port;
#                                                 prints its base URL
#   scripts/dev/restore-drill.sh stop             stop both servers and delete the drill's folder
#
# Everything under .local/restore-drill/ (git-ignored): primary/, archive/, backup/, restored/.
# Ports: QUIESCE_HA_PORT (default 7400) + 40 for the primary, + 41 for the restored server.
# Postgres refuses to run as root: as root, the servers run as the postgres system user.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
drill="$root/.local/restore-drill"
base=${QUIESCE_HA_PORT:-7400}
primary_port=$((base + 40))
restored_port=$((base + 41))
bin=${QUIESCE_HA_PG_BIN:-/usr/lib/postgresql/15/bin}
run_as=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  run_as=(runuser -u postgres --)
fi

sql() { psql -X -Atq -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"; }

start_server() { # DATA PORT
  "${run_as[@]}" "$bin/pg_ctl" -D "$1" -l "$1/server.log" -w -t 60 \
    -o "-p $2 -k $drill -c listen_addresses=127.0.0.1" start >&2
}

stop_server() { # DATA
  if [ -f "$1/postmaster.pid" ]; then
    "${run_as[@]}" "$bin/pg_ctl" -D "$1" -m immediate -w stop >&2 || true
  fi
}

case "${1:-}" in
  start)
    "$0" stop
    mkdir -p "$drill/archive"
    [ "$(id -u)" = 0 ] && chown postgres "$drill" "$drill/archive"
    "${run_as[@]}" "$bin/initdb" -D "$drill/primary" -U postgres --auth=trust >/dev/null
    cat >>"$drill/primary/postgresql.conf" <<EOF
wal_level = replica
archive_mode = on
archive_command = 'test ! -f $drill/archive/%f && cp %p $drill/archive/%f'
max_connections = 100
EOF
    start_server "$drill/primary" "$primary_port"
    echo "postgres://postgres@127.0.0.1:$primary_port"
    ;;
  backup)
    rm -rf "$drill/backup"
    "${run_as[@]}" "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres \
      -D "$drill/backup" --checkpoint=fast --wal-method=stream >&2
    ;;
  archive)
    segment=$(sql "$primary_port" "SELECT pg_walfile_name(pg_switch_wal())")
    for _ in $(seq 1 600); do
      [ -f "$drill/archive/$segment" ] && exit 0
      sleep 0.1
    done
    echo "restore-drill: WAL segment $segment not archived within 60 s" >&2
    exit 1
    ;;
  restore)
    target=${2:?usage: restore-drill.sh restore TIME}
    stop_server "$drill/restored"
    rm -rf "$drill/restored"
    cp -a "$drill/backup" "$drill/restored"
    cat >>"$drill/restored/postgresql.auto.conf" <<EOF
restore_command = 'cp $drill/archive/%f %p'
recovery_target_time = '$target'
recovery_target_action = 'promote'
archive_mode = off
EOF
    "${run_as[@]}" touch "$drill/restored/recovery.signal"
    start_server "$drill/restored" "$restored_port"
    for _ in $(seq 1 600); do
      [ "$(sql "$restored_port" "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] && {
        echo "postgres://postgres@127.0.0.1:$restored_port"
        exit 0
      }
      sleep 0.1
    done
    echo "restore-drill: the restored server was not promoted within 60 s" >&2
    tail -20 "$drill/restored/server.log" >&2
    exit 1
    ;;
  stop)
    stop_server "$drill/restored"
    stop_server "$drill/primary"
    rm -rf "$drill"
    ;;
  *)
    echo "usage: restore-drill.sh start | backup | archive | restore TIME | stop" >&2
    exit 2
    ;;
esac
