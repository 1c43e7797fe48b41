#!/usr/bin/env bash
# A private Postgres high-availability cluster for the HA suite (`make ha`): three PostgreSQL 15
# nodes managed by Patroni with etcd as its store, `synchronous_mode: true`, behind HAProxy as
# Patroni's documentation sets it up: a read-write port routed to the leader by Patroni's REST
# check `/primary`, a read-only port routed to the replicas by `/replica`, and the sessions of a
# node marked down shut (`on-marked-down shutdown-sessions`). Everything on loopback ports,
# under .local/ha/ (git-ignored).
#
#   scripts/dev/postgres-ha.sh start           start (or reuse) the cluster; prints export lines:
#                                              QUIESCE_HA_URL (HAProxy's read-write port),
#                                              QUIESCE_HA_READ_URL (its read-only port),
#                                              QUIESCE_HA_PATRONI (the nodes' REST APIs)
#   scripts/dev/postgres-ha.sh stop            stop every process and delete .local/ha/
#   scripts/dev/postgres-ha.sh status          patronictl list
#   scripts/dev/postgres-ha.sh leader          the leader's name (node1, node2 or node3)
#   scripts/dev/postgres-ha.sh members         Patroni's GET /cluster (JSON)
#   scripts/dev/postgres-ha.sh kill-node       SIGKILL the leader's Patroni and its postgres
#   scripts/dev/postgres-ha.sh kill-postgres   SIGKILL the leader's postmaster alone (Patroni,
#                                              still holding the leader key, starts it again)
#   scripts/dev/postgres-ha.sh pause           SIGSTOP the leader's Patroni and postgres (frozen)
#   scripts/dev/postgres-ha.sh resume          SIGCONT what pause stopped
#   scripts/dev/postgres-ha.sh switchover      planned switchover to the synchronous standby
#                                              (Patroni's REST API, POST /switchover)
#   scripts/dev/postgres-ha.sh read-only SECS  the leader read-only for SECS seconds
#                                              (default_transaction_read_only, reloaded) while
#                                              Patroni and HAProxy still call it the primary
#   scripts/dev/postgres-ha.sh replay-pause    WAL replay paused on every streaming replica
#                                              (pg_wal_replay_pause), Patroni in maintenance mode
#                                              meanwhile: it resumes a paused replay otherwise
#   scripts/dev/postgres-ha.sh replay-resume   replay resumed, maintenance mode off
#   (each of these six but replay-resume prints the node it acted on (a first replica for
#   replay-pause) and when it did, in unix seconds: for a switchover the new leader and the
#   request's time)
#   scripts/dev/postgres-ha.sh heal            resume, undo read-only, start stopped nodes, and
#                                              wait until the cluster is whole (wait-healthy)
#   scripts/dev/postgres-ha.sh wait-healthy    until 3 members, a leader, a streaming sync
#                                              standby and HAProxy routing writes to the leader
#
# Ports: QUIESCE_HA_PORT (default 7400) is etcd's client port; etcd's peer port is +1, HAProxy's
# read-write, read-only and stats ports +10, +11, +12, the nodes' Postgres ports +21..+23 and
# their Patroni REST ports +31..+33. Timers for tests (Patroni's dynamic configuration): ttl 10 s,
# loop_wait 1 s, retry_timeout 4 s (Patroni's rule: loop_wait + 2 * retry_timeout <= ttl);
# production runs Patroni's defaults, ttl 30, loop_wait 10, retry_timeout 10. The nodes run
# without fsync (the tests kill processes, not the machine) and checkpoint every 30 s.
#
# Patroni 3.1.2 from PyPI in a virtualenv (.local/patroni/, scripts/dev/patroni-requirements.txt):
# Debian bookworm's 3.0.2 lets a leader that was frozen and resumed take its key back (fixed in
# 3.1.0), and 3.2.0 and later raise a ttl below 20 s to 20 s. Debian's etcd-server, haproxy and
# postgresql-15 are installed with apt-get when missing and we are root. Postgres refuses to run
# as root: as root, Patroni and postgres run as the postgres system user.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
base=${QUIESCE_HA_PORT:-7400}
etcd_port=$base
etcd_peer_port=$((base + 1))
rw_port=$((base + 10))
ro_port=$((base + 11))
stats_port=$((base + 12))
nodes=(node1 node2 node3)
pg_port() { echo $((base + 20 + ${1#node})); }
rest_port() { echo $((base + 30 + ${1#node})); }
pg_bin=${QUIESCE_HA_PG_BIN:-/usr/lib/postgresql/15/bin}
requirements="$root/scripts/dev/patroni-requirements.txt"

say() { echo "postgres-ha: $*" >&2; }
die() { say "$*"; exit 1; }

# setpriv execs in place (no parent process of its own, which would stop with a paused Patroni).
run_as=()
owner=$(id -un)
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  run_as=(setpriv --reuid=postgres --regid=postgres --init-groups env HOME=/tmp)
  owner=postgres
fi

# The cluster's folder and Patroni's virtualenv: under .local/ when the user the nodes run as can
# reach it, else (a checkout in root's home) under /var/tmp, named after the checkout.
home="$root/.local"
if [ "$owner" != "$(id -un)" ] && ! "${run_as[@]}" test -x "$root" 2>/dev/null; then
  home="/var/tmp/quiesce-ha-$(printf %s "$root" | md5sum | cut -c1-8)"
fi
dir="$home/ha"
venv="$home/patroni"

as_owner() { "${run_as[@]}" "$@"; }

install_debian() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null ||
    die "$* needed (Debian/Ubuntu: apt-get install $*)"
  say "installing Debian's $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

need_tools() {
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v haproxy >/dev/null || missing+=(haproxy)
  [ -x "$pg_bin/postgres" ] || missing+=(postgresql-15)
  command -v psql >/dev/null || missing+=(postgresql-client)
  command -v curl >/dev/null || missing+=(curl)
  python3_bin=$(command -v /usr/bin/python3 || command -v python3) || missing+=(python3-venv)
  if [ "${#missing[@]}" -gt 0 ]; then install_debian "${missing[@]}"; fi
  python3_bin=$(command -v /usr/bin/python3 || command -v python3)
  if ! "$python3_bin" -c 'import venv, ensurepip' 2>/dev/null; then install_debian python3-venv; fi
  # Debian's postgresql package starts a cluster of its own on 5432: the machine's Postgres, left
  # alone. Only the binaries are used here.
  if [ ! -x "$venv/bin/patroni" ] || ! cmp -s "$requirements" "$venv/requirements.txt"; then
    say "installing Patroni from PyPI into $venv"
    rm -rf "$venv"
    mkdir -p "$home"
    "$python3_bin" -m venv "$venv"
    "$venv/bin/pip" install -q -r "$requirements" >"$home/patroni-install.log" 2>&1 ||
      die "pip install failed; see $home/patroni-install.log"
    cp "$requirements" "$venv/requirements.txt"
  fi
  chmod -R a+rX "$venv"
}

py() { "$venv/bin/python" -c "$@"; }

# GET a node's REST API (first that answers when no node is given).
rest() {
  local path=$1 node=${2:-} candidates=()
  if [ -n "$node" ]; then candidates=("$node"); else candidates=("${nodes[@]}"); fi
  for n in "${candidates[@]}"; do
    curl -fsS --max-time 2 "http://127.0.0.1:$(rest_port "$n")$path" 2>/dev/null && return 0
  done
  return 1
}

# One line per member: name role state timeline lag (from any node's GET /cluster).
members_lines() {
  rest /cluster | py '
import json, sys
for m in json.load(sys.stdin).get("members", []):
    print(m["name"], m.get("role", "-"), m.get("state", "-"), m.get("timeline", 0), m.get("lag", 0))
'
}

leader() {
  local name
  name=$(members_lines 2>/dev/null | awk '$2 == "leader" && $3 == "running" { print $1 }' | head -1)
  [ -n "$name" ] || return 1
  echo "$name"
}

sync_standby() {
  members_lines 2>/dev/null | awk '$2 == "sync_standby" && $3 == "streaming" { print $1 }' | head -1
}

postmaster_pid() {
  local file="$dir/$1/data/postmaster.pid"
  [ -f "$file" ] && head -1 "$file"
}

patroni_pid() { cat "$dir/$1/patroni.pid" 2>/dev/null; }

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

children() { ps -o pid= --ppid "$1" 2>/dev/null | tr -s " \n" " "; }

psql_at() {
  local port=$1
  shift
  psql -X -q -t -A -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"
}

write_etcd() {
  mkdir -p "$dir/etcd"
  setsid etcd --name ha --data-dir "$dir/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "ha=http://127.0.0.1:$etcd_peer_port" --initial-cluster-state new \
    --log-outputs stderr --logger zap >"$dir/etcd/etcd.log" 2>&1 </dev/null &
  echo $! >"$dir/etcd/etcd.pid"
  for _ in $(seq 1 100); do
    curl -fsS --max-time 1 "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' && return
    sleep 0.1
  done
  die "etcd did not start; see $dir/etcd/etcd.log"
}

write_patroni_config() {
  local node=$1 node_dir="$dir/$1"
  mkdir -p "$node_dir"
  cat >"$node_dir/patroni.yml" <<EOF
scope: quiesce-ha
namespace: /quiesce-ha/
name: $node
restapi:
  listen: 127.0.0.1:$(rest_port "$node")
  connect_address: 127.0.0.1:$(rest_port "$node")
etcd3:
  host: 127.0.0.1:$etcd_port
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 300
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        # The suite kills processes, never the machine: the OS keeps what was written, so
        # fsync is off (on a disk shared with builds, a crashed node's end-of-recovery
        # checkpoint took seconds of fsync), and checkpoints every 30 s bound its redo.
        fsync: "off"
        checkpoint_timeout: 30s
        # A commit waits for the synchronous standby: after the primary restarts, a standby
        # retries its connection every wal_retrieve_retry_interval (5 s by default).
        wal_retrieve_retry_interval: 500ms
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth: trust
postgresql:
  listen: 127.0.0.1:$(pg_port "$node")
  connect_address: 127.0.0.1:$(pg_port "$node")
  data_dir: $node_dir/data
  bin_dir: $pg_bin
  pgpass: $node_dir/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication replicator 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: $node_dir
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
EOF
  [ "$owner" = "$(id -un)" ] || chown -R "$owner" "$node_dir"
}

start_node() {
  local node=$1 node_dir="$dir/$1"
  alive "$(patroni_pid "$node")" && return
  # shellcheck disable=SC2016 # expanded by the node's shell
  # Detached, no descriptor of ours held open (a caller reading our output would wait for it).
  "${run_as[@]}" setsid bash -c 'echo $$ >"$1/patroni.pid"; exec "$2/bin/patroni" "$1/patroni.yml" >>"$1/patroni.log" 2>&1' \
    _ "$node_dir" "$venv" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 1 50); do
    alive "$(patroni_pid "$node")" && return
    sleep 0.1
  done
  die "Patroni of $node did not start; see $node_dir/patroni.log"
}

# One HAProxy section: its port, the Patroni check that puts a node in it, every node.
haproxy_section() {
  local name=$1 port=$2 check=$3
  cat <<EOF

listen $name
    bind 127.0.0.1:$port
    balance roundrobin
    option httpchk OPTIONS $check
    http-check expect status 200
    default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
EOF
  for node in "${nodes[@]}"; do
    echo "    server $node 127.0.0.1:$(pg_port "$node") maxconn 300 check port $(rest_port "$node")"
  done
}

write_haproxy() {
  mkdir -p "$dir/haproxy"
  {
    cat <<EOF
global
    maxconn 2000

defaults
    mode tcp
    retries 2
    timeout queue 5s
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s

listen stats
    mode http
    bind 127.0.0.1:$stats_port
    stats enable
    stats uri /
EOF
    # Writes go to the node whose Patroni answers /primary (the leader), reads to those that
    # answer /replica. A node marked down has its sessions shut at once; checked every 500 ms
    # (250 ms while changing state), down after 2 failures, up after 1 success, so that an old
    # primary leaves as a switchover demotes it.
    haproxy_section primary "$rw_port" /primary
    haproxy_section replicas "$ro_port" /replica
  } >"$dir/haproxy/haproxy.cfg"
  haproxy -c -q -f "$dir/haproxy/haproxy.cfg" || die "haproxy.cfg is invalid"
  haproxy -D -f "$dir/haproxy/haproxy.cfg" -p "$dir/haproxy/haproxy.pid" </dev/null >"$dir/haproxy/haproxy.log" 2>&1 ||
    die "haproxy did not start; see $dir/haproxy/haproxy.log"
}

# Until 3 members on one timeline, a running leader, a streaming synchronous standby, the third
# streaming too, the leader writable, and HAProxy's ports routing to the leader and a replica.
healthy() {
  local lines leader_name
  lines=$(members_lines 2>/dev/null) || return 1
  [ "$(wc -l <<<"$lines")" = 3 ] || return 1
  leader_name=$(awk '$2 == "leader" && $3 == "running" { print $1 }' <<<"$lines")
  [ -n "$leader_name" ] || return 1
  [ "$(awk '$2 == "sync_standby" && $3 == "streaming"' <<<"$lines" | wc -l)" = 1 ] || return 1
  [ "$(awk '$2 != "leader" && $3 == "streaming"' <<<"$lines" | wc -l)" = 2 ] || return 1
  [ "$(awk '{ print $4 }' <<<"$lines" | sort -u | wc -l)" = 1 ] || return 1
  [ "$(psql_at "$rw_port" -c 'SELECT NOT pg_is_in_recovery() AND current_setting($$transaction_read_only$$) = $$off$$, inet_server_port()' 2>/dev/null)" = "t|$(pg_port "$leader_name")" ] || return 1
  [ "$(psql_at "$ro_port" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = t ] || return 1
}

wait_healthy() {
  for _ in $(seq 1 ${1:-600}); do
    healthy && return
    sleep 0.2
  done
  "$venv/bin/patronictl" -c "$dir/node1/patroni.yml" list >&2 || true
  die "the cluster is not whole after $((${1:-600} / 5)) s"
}

exports() {
  local nodes_rest=()
  for node in "${nodes[@]}"; do nodes_rest+=("http://127.0.0.1:$(rest_port "$node")"); done
  echo "export QUIESCE_HA_URL=postgres://postgres@127.0.0.1:$rw_port/postgres"
  echo "export QUIESCE_HA_READ_URL=postgres://postgres@127.0.0.1:$ro_port/postgres"
  echo "export QUIESCE_HA_PATRONI=$(IFS=,; echo "${nodes_rest[*]}")"
}

start() {
  need_tools
  if [ -f "$dir/etcd/etcd.pid" ] && alive "$(cat "$dir/etcd/etcd.pid")" && healthy; then
    say "reusing the cluster on ports $base-$((base + 33))"
    exports
    return
  fi
  stop
  for port in "$etcd_port" "$etcd_peer_port" "$rw_port" "$ro_port" "$stats_port" \
    $(for n in "${nodes[@]}"; do pg_port "$n"; rest_port "$n"; done); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "port $port is taken; run '$0 stop' or set QUIESCE_HA_PORT"
    fi
  done
  mkdir -p "$dir"
  chmod 755 "$home" "$dir"
  write_etcd
  for node in "${nodes[@]}"; do write_patroni_config "$node"; done
  # The first node bootstraps the cluster; the others then clone it.
  start_node node1
  for _ in $(seq 1 300); do
    leader >/dev/null && break
    sleep 0.2
  done
  leader >/dev/null || die "node1 did not bootstrap; see $dir/node1/patroni.log"
  start_node node2
  start_node node3
  write_haproxy
  wait_healthy
  say "3 nodes (leader $(leader)) behind HAProxy: writes on $rw_port, reads on $ro_port"
  exports
}

stop() {
  resume_paused
  if [ -f "$dir/haproxy/haproxy.pid" ]; then kill "$(cat "$dir/haproxy/haproxy.pid")" 2>/dev/null || true; fi
  for node in "${nodes[@]}"; do
    # Patroni first, so that it starts nothing again; then each postgres, stopped at once (its
    # shared memory released, unlike SIGKILL).
    local pid
    pid=$(patroni_pid "$node") && alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    if [ -f "$dir/$node/data/postmaster.pid" ] && alive "$(postmaster_pid "$node")"; then
      as_owner "$pg_bin/pg_ctl" -D "$dir/$node/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  done
  if [ -f "$dir/etcd/etcd.pid" ]; then
    local etcd
    etcd=$(cat "$dir/etcd/etcd.pid")
    kill "$etcd" 2>/dev/null || true
    for _ in $(seq 1 50); do alive "$etcd" || break; sleep 0.1; done
  fi
  rm -rf "$dir"
}

# The leader's name, or an error when no leader is running.
leader_or_die() { leader || die "no running leader"; }

kill_node() {
  local node pid pm at
  node=$(leader_or_die)
  pid=$(patroni_pid "$node") || true
  pm=$(postmaster_pid "$node") || true
  local kids=
  [ -n "$pm" ] && kids=$(children "$pm")
  at=$(date +%s.%N)
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  # shellcheck disable=SC2086
  [ -n "$pm" ] && kill -9 "$pm" $kids 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive "$pid" || alive "$pm" || break
    sleep 0.1
  done
  say "killed $node (Patroni $pid, postmaster $pm)"
  echo "$node $at"
}

kill_postgres() {
  local node pm at
  node=$(leader_or_die)
  pm=$(postmaster_pid "$node") || die "no postmaster.pid for $node"
  at=$(date +%s.%N)
  kill -9 "$pm"
  for _ in $(seq 1 50); do alive "$pm" || break; sleep 0.1; done
  say "killed the postmaster of $node ($pm)"
  echo "$node $at"
}

pause() {
  local node pid pm at
  [ -f "$dir/paused" ] && die "already paused: $(cat "$dir/paused")"
  node=$(leader_or_die)
  pid=$(patroni_pid "$node")
  pm=$(postmaster_pid "$node")
  local kids
  kids=$(children "$pm")
  # Patroni first, so that it does not see its postgres stop; resumed in the reverse order.
  at=$(date +%s.%N)
  kill -STOP "$pid"
  # shellcheck disable=SC2086
  kill -STOP "$pm" $kids
  echo "$kids $pm $pid" >"$dir/paused"
  say "paused $node (Patroni $pid, postmaster $pm and its children)"
  echo "$node $at"
}

resume_paused() {
  [ -f "$dir/paused" ] || return 0
  local pids
  pids=$(cat "$dir/paused")
  # shellcheck disable=SC2086
  kill -CONT $pids 2>/dev/null || true
  rm -f "$dir/paused"
  say "resumed $pids"
}

switchover() {
  local node candidate at
  node=$(leader_or_die)
  candidate=$(sync_standby)
  [ -n "$candidate" ] || die "no streaming synchronous standby to switch over to"
  # Through the leader's REST API (patronictl takes seconds to start on a busy machine); it
  # answers once the candidate is promoted.
  at=$(date +%s.%N)
  curl -fsS --max-time 60 -X POST "http://127.0.0.1:$(rest_port "$node")/switchover" \
    -d "{\"leader\": \"$node\", \"candidate\": \"$candidate\"}" >"$dir/switchover.log" 2>&1 ||
    die "switchover failed: $(cat "$dir/switchover.log")"
  say "switched over from $node to $candidate"
  echo "$candidate $at"
}

read_only_on() {
  psql_at "$(pg_port "$1")" -c "ALTER SYSTEM SET default_transaction_read_only = on" \
    -c "SELECT pg_reload_conf()" >/dev/null
}

# ALTER SYSTEM is refused in a read-only transaction: the session's own setting goes first.
read_only_off() {
  psql_at "$(pg_port "$1")" -c "SET default_transaction_read_only = off" \
    -c "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" >/dev/null
}

read_only() {
  local seconds=${1:?read-only SECONDS} at
  read_only_node=$(leader_or_die)
  # Writable again however this script ends.
  trap 'read_only_off "$read_only_node"' EXIT
  read_only_on "$read_only_node"
  at=$(date +%s.%N)
  say "$read_only_node read-only for $seconds s"
  sleep "$seconds"
  read_only_off "$read_only_node"
  trap - EXIT
  say "$read_only_node writable again"
  echo "$read_only_node $at"
}

# Patroni resumes a paused WAL replay on its next loop unless the cluster is in maintenance
# mode (paused), so replay_pause pauses Patroni's automation first; replay_resume undoes both.
set_maintenance() {
  local node
  for node in "${nodes[@]}"; do
    curl -fsS --max-time 5 -X PATCH "http://127.0.0.1:$(rest_port "$node")/config" \
      -d "{\"pause\": $1}" >/dev/null 2>&1 && return 0
  done
  die "no Patroni REST API took the maintenance mode"
}

replicas() { members_lines 2>/dev/null | awk '$2 != "leader" && $3 == "streaming" { print $1 }'; }

replay_pause() {
  local node at paused
  set_maintenance true
  for _ in $(seq 1 100); do
    rest /cluster | grep -q '"pause": *true' && break
    sleep 0.1
  done
  paused=()
  for node in $(replicas); do
    psql_at "$(pg_port "$node")" -c "SELECT pg_wal_replay_pause()" >/dev/null
    paused+=("$node")
  done
  [ ${#paused[@]} -gt 0 ] || die "no streaming replica to pause"
  for node in "${paused[@]}"; do
    for _ in $(seq 1 100); do
      [ "$(psql_at "$(pg_port "$node")" -c "SELECT pg_get_wal_replay_pause_state()")" = paused ] && break
      sleep 0.1
    done
  done
  at=$(date +%s.%N)
  say "replay paused on ${paused[*]} (Patroni in maintenance mode)"
  echo "${paused[0]} $at"
}

replay_resume() {
  local node
  for node in "${nodes[@]}"; do
    if alive "$(postmaster_pid "$node" || true)" &&
      [ "$(psql_at "$(pg_port "$node")" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = t ]; then
      psql_at "$(pg_port "$node")" -c "SELECT pg_wal_replay_resume()" >/dev/null || true
    fi
  done
  set_maintenance false
}

heal() {
  need_tools
  resume_paused
  replay_resume
  for node in "${nodes[@]}"; do
    if alive "$(postmaster_pid "$node" || true)" &&
      [ "$(psql_at "$(pg_port "$node")" -c 'SHOW default_transaction_read_only' 2>/dev/null)" = on ]; then
      read_only_off "$node"
    fi
    start_node "$node"
  done
  wait_healthy
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) "$venv/bin/patronictl" -c "$dir/node1/patroni.yml" list ;;
  leader) leader_or_die ;;
  members) rest /cluster ;;
  kill-node) kill_node ;;
  kill-postgres) kill_postgres ;;
  pause) pause ;;
  resume) resume_paused ;;
  switchover) switchover ;;
  read-only) read_only "${2:-}" ;;
  replay-pause) replay_pause ;;
  replay-resume) replay_resume ;;
  heal) heal ;;
  wait-healthy) wait_healthy ;;
  exports) exports ;;
  *) echo "usage: $0 start|stop|status|leader|members|kill-node|kill-postgres|pause|resume|switchover|read-only SECONDS|replay-pause|replay-resume|heal|wait-healthy|exports" >&2; exit 2 ;;
esac
