#!/usr/bin/env bash
# A private Redis Cluster for the cluster suite and bench: 3 masters and 3 replicas of the
# machine's redis-server on loopback ports, under .local/redis-cluster/ (installed with apt-get
# when missing and allowed, as scripts/dev/services.sh does).
#
#   scripts/dev/redis-cluster.sh start        start (or reuse) the cluster; prints
#                                             export QUIESCE_CLUSTER_URL=redis+cluster://...
#   scripts/dev/redis-cluster.sh stop         stop every node and delete the folder
#   scripts/dev/redis-cluster.sh kill PORT    SIGKILL one node
#   scripts/dev/redis-cluster.sh restart PORT start a killed node again (it rejoins)
#   scripts/dev/redis-cluster.sh pause PORT   SIGSTOP one node (it hangs: connections stay open)
#   scripts/dev/redis-cluster.sh resume PORT  SIGCONT a paused node
#   scripts/dev/redis-cluster.sh role PORT    master or slave, as the node says
#   scripts/dev/redis-cluster.sh wait-ok      until every slot is served (cluster_state:ok)
#   scripts/dev/redis-cluster.sh wait-synced  until every replica is in sync with its master
#   scripts/dev/redis-cluster.sh check        whether every node agrees on the slots and all are served
#   scripts/dev/redis-cluster.sh heal         until check passes, fixing what a test left behind
#
# QUIESCE_CLUSTER_PORT (default 7101) is the first of the six ports. cluster-node-timeout is
# 1000 ms, so a killed master's replica is promoted within a few seconds.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
dir="$root/.local/redis-cluster"
first=${QUIESCE_CLUSTER_PORT:-7101}
ports=()
for i in 0 1 2 3 4 5; do ports+=($((first + i))); done

say() { echo "redis-cluster: $*" >&2; }

need_redis() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing redis-server (Debian package)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    say "redis-server and redis-cli are needed (apt-get install redis-server)"
    exit 1
  fi
}

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

alive() { cli "$1" ping >/dev/null 2>&1; }

start_node() {
  local port=$1
  mkdir -p "$dir/$port"
  (cd "$dir/$port" && redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
    --appendonly yes --appendfsync everysec --save '' \
    --logfile "$dir/$port/redis.log" --pidfile "$dir/$port/redis.pid")
  for _ in $(seq 1 100); do
    alive "$port" && return
    sleep 0.05
  done
  say "node $port did not start; see $dir/$port/redis.log"
  exit 1
}

cluster_ok() { cli "${1:-${ports[0]}}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }

wait_ok() {
  for _ in $(seq 1 300); do
    local ok=1
    for port in "${ports[@]}"; do
      if alive "$port" && ! cluster_ok "$port"; then ok=0; fi
    done
    if [ "$ok" = 1 ]; then return; fi
    sleep 0.1
  done
  say "the cluster did not reach cluster_state:ok in 30 s"
  exit 1
}

# Until every replica has finished its sync with its master (a replica that never synced
# cannot take over: it stays a replica of a dead master).
wait_synced() {
  for _ in $(seq 1 300); do
    local ok=1
    for port in "${ports[@]}"; do
      alive "$port" || continue
      if cli "$port" role 2>/dev/null | head -1 | grep -q slave &&
        ! cli "$port" info replication | grep -q 'master_link_status:up'; then
        ok=0
      fi
    done
    if [ "$ok" = 1 ]; then return; fi
    sleep 0.1
  done
  say "replicas did not finish their sync in 30 s"
  exit 1
}

# A live node's address, for redis-cli --cluster.
any_node() {
  for port in "${ports[@]}"; do
    if alive "$port"; then echo "127.0.0.1:$port"; return; fi
  done
  say "no node of the cluster answers"
  exit 1
}

check() { redis-cli --cluster check "$(any_node)" >/dev/null 2>&1; }

# A replica promoted before it heard of its master's last migrated slot claims the others only:
# that slot is served by nobody and the new master refuses every command (cluster_state:fail).
# redis-cli --cluster fix covers such slots (asking to confirm: answered yes) and closes open ones.
heal() {
  # A node a test killed and did not restart rejoins first.
  for port in "${ports[@]}"; do
    if ! alive "$port" && [ -d "$dir/$port" ]; then
      say "restarting node $port"
      start_node "$port"
    fi
  done
  for _ in $(seq 1 20); do
    check && return
    yes yes 2>/dev/null | redis-cli --cluster fix "$(any_node)" >"$dir/fix.log" 2>&1 || true
    for _ in $(seq 1 10); do check && return; sleep 0.5; done
  done
  say "the cluster does not pass redis-cli --cluster check; see $dir/fix.log"
  exit 1
}

url() {
  local nodes
  nodes=$(printf '127.0.0.1:%s,' "${ports[@]}")
  echo "export QUIESCE_CLUSTER_URL=redis+cluster://${nodes%,}"
}

start() {
  need_redis
  if cluster_ok && [ "$(cli "${ports[0]}" cluster info | grep -c 'cluster_known_nodes:6')" = 1 ]; then
    say "reusing the cluster on ports ${ports[0]}-${ports[5]}"
    url
    return
  fi
  for port in "${ports[@]}"; do
    if alive "$port"; then
      say "port $port answers but is not this cluster; run '$0 stop' or set QUIESCE_CLUSTER_PORT"
      exit 1
    fi
  done
  rm -rf "$dir"
  mkdir -p "$dir"
  for port in "${ports[@]}"; do start_node "$port"; done
  redis-cli --cluster create $(printf "127.0.0.1:%s " "${ports[@]}") --cluster-yes \
    --cluster-replicas 1 >"$dir/create.log" 2>&1 || {
    say "cluster create failed: see $dir/create.log"
    exit 1
  }
  wait_ok
  wait_synced
  say "3 masters and 3 replicas on ports ${ports[0]}-${ports[5]}"
  url
}

stop() {
  for port in "${ports[@]}"; do
    if [ -f "$dir/$port/redis.pid" ]; then
      kill "$(cat "$dir/$port/redis.pid")" 2>/dev/null || true
    fi
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 1 50); do alive "$port" || break; sleep 0.1; done
  done
  rm -rf "$dir"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  url) url ;;
  wait-ok) wait_ok ;;
  wait-synced) wait_synced ;;
  check) check ;;
  heal) heal; wait_ok; wait_synced ;;
  kill)
    kill -9 "$(cat "$dir/${2:?port}/redis.pid")"
    for _ in $(seq 1 50); do alive "$2" || exit 0; sleep 0.1; done
    say "node $2 still answers"; exit 1 ;;
  restart) start_node "${2:?port}" ;;
  pause) kill -STOP "$(cat "$dir/${2:?port}/redis.pid")" ;;
  resume) kill -CONT "$(cat "$dir/${2:?port}/redis.pid")" ;;
  role) cli "${2:?port}" role | head -1 ;;
  *) echo "usage: $0 start|stop|url|wait-ok|wait-synced|check|heal|kill PORT|restart PORT|pause PORT|resume PORT|role PORT" >&2; exit 2 ;;
esac
