# Shared by the bench scripts (sourced from the repository root, not run): quiesce servers on
# databases and Redis prefixes of their own, dropped when the run is done or on exit. The caller
# sets `out` (where server logs go) and may set `quiesce_bin` (default target/release/quiesce).
# `redis_url` may change between servers (a node, or a redis+cluster:// URL): each prefix's keys
# are dropped where its server ran.
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
redis_url=${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
source scripts/dev/free-port.sh
port=$(free_port)
loadgen=target/release/quiesce-loadgen
quiesce_bin=${quiesce_bin:-target/release/quiesce}
dbs=()
prefixes=()
declare -A prefix_url=()
server=

# redis_primaries URL: the primaries of a Redis URL, one host:port a line: the node itself, or
# every master of a redis+cluster:// URL (every_node's masters).
redis_primaries() {
  every_node "$1" | awk '$2 == "master" {print $1}'
}

# delete_prefix URL PREFIX: deletes every key of a prefix (`{prefix:...}` and `{prefix}:...`).
delete_prefix() {
  local url=$1 pattern="{$2[:}]*" node
  if [[ $url == redis+cluster://* ]]; then
    # A key at a time: keys of different slots cannot share a DEL on a cluster.
    for node in $(redis_primaries "$url"); do
      redis-cli -h "${node%:*}" -p "${node##*:}" --scan --pattern "$pattern" | awk '{print "DEL", $0}' |
        redis-cli -h "${node%:*}" -p "${node##*:}" >/dev/null || true
    done
  else
    redis-cli -u "$url" --scan --pattern "$pattern" | xargs -r redis-cli -u "$url" del >/dev/null || true
  fi
}

# drop_runs: drops the databases and Redis keys of every server started so far.
drop_runs() {
  for db in "${dbs[@]}"; do
    psql "${base_db%/*}/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
  for prefix in "${prefixes[@]}"; do
    delete_prefix "${prefix_url[$prefix]:-$redis_url}" "$prefix"
  done
  dbs=()
  prefixes=()
}

cleanup() {
  [ -n "${server:-}" ] && { kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  drop_runs
}
trap cleanup EXIT

# start_server NAME [VAR=value ...]: a `quiesce serve` on its own database and prefix; sets
# DATABASE_URL_RUN and REDIS_PREFIX_RUN to them.
start_server() {
  local name=$1; shift
  local db="quiesce_bench_${name//-/_}_$suffix" prefix="bench-$name-$suffix"
  dbs+=("$db"); prefixes+=("$prefix"); prefix_url[$prefix]=$redis_url
  export DATABASE_URL_RUN="${base_db%/*}/$db" REDIS_PREFIX_RUN="$prefix"
  env QUIESCE_DATABASE_URL="$DATABASE_URL_RUN" QUIESCE_REDIS_URL="$redis_url" \
    QUIESCE_REDIS_PREFIX="$prefix" QUIESCE_LISTEN="127.0.0.1:$port" QUIESCE_METRICS_LISTEN=off \
    QUIESCE_RATE_LIMIT=100000000 QUIESCE_RATE_BURST=100000000 QUIESCE_MAX_CONCURRENT_INGEST=4096 \
    RUST_LOG=warn "$@" "$quiesce_bin" serve --insecure-dev >"$out/server-$name.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$server" 2>/dev/null || { cat "$out/server-$name.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench: server $name did not start" >&2; exit 1
}

stop_server() {
  kill -TERM "$server"; wait "$server" || true; server=
}

# wal_lsn: the Postgres server's current WAL position (the whole server's: every database's
# writes move it, other users' included).
wal_lsn() {
  psql "${base_db%/*}/postgres" -Atc 'SELECT pg_current_wal_lsn()'
}

# run_loadgen NAME [loadgen options...]: writes the JSON report to $out/NAME.json, with the WAL
# the server wrote from the first request to the end of the report (the drain and the wait after
# it included, when the report has one) as wal_bytes and per accepted event as
# wal_bytes_per_event.
run_loadgen() {
  local name=$1; shift
  echo "bench: $name" >&2
  local before after
  before=$(wal_lsn)
  "$loadgen" --url "http://127.0.0.1:$port" --json --run-id "$name" "$@" >"$out/$name.json"
  after=$(wal_lsn)
  local bytes
  bytes=$(psql "${base_db%/*}/postgres" -Atc "SELECT pg_wal_lsn_diff('$after', '$before')::bigint")
  python3 - "$out/$name.json" "$bytes" <<'PY'
import json, sys
path, wal = sys.argv[1], int(sys.argv[2])
report = json.load(open(path))
report["wal_bytes"] = wal
report["wal_bytes_per_event"] = wal / max(report["events_accepted"], 1)
json.dump(report, open(path, "w"))
PY
}

# ingest_only NAME BATCHED_EVENTS SINGLE_EVENTS: the batched run (100 events a request, 64
# connections) and the one-event-per-request run (128 connections) of the bench over 10k
# entities (or $entities) against a server of $quiesce_bin with a 60 s window, so no evaluation
# competes with ingest: $out/NAME-batched.json and $out/NAME-single.json. The server's database
# and keys are dropped afterwards, so the next run does not share its leftover data.
ingest_only() {
  local name=$1 batched=$2 single=$3
  start_server "$name" QUIESCE_DEBOUNCE_WINDOW=60s QUIESCE_MAX_WAIT=120s
  run_loadgen "$name-batched" --scenario burst --events "$batched" --entities "${entities:-10000}" \
    --batch 100 --connections 64
  run_loadgen "$name-single" --scenario burst --events "$single" --entities "${entities:-10000}" \
    --batch 1 --connections 128
  stop_server
  drop_runs
}

# The ceiling builds (bench/ceilings/NAME.patch, see bench/ceilings/run.sh): a copy of the working
# tree's tracked files with the patch applied, built under .local/ceilings/ (whose target
# directory starts as a copy of target/release, so that only quiesce itself is compiled) into
# .local/ceilings/bin/quiesce-NAME. They break correctness on purpose: only ever measured. A
# build is kept while what it was built from (the tracked files that go into the binary, and the
# patch) is unchanged: a digest of them lies beside the binary. `build_variant NAME [PATCH]`:
# the patch is bench/ceilings/NAME.patch unless given (bench/costs/ keeps its own).
ceilings_work=.local/ceilings
build_variant() {
  local name=$1 patch="$PWD/${2:-bench/ceilings/$1.patch}" copy="$ceilings_work/src-$1" here=$PWD
  local bin="$ceilings_work/bin/quiesce-$1" digest
  mkdir -p "$ceilings_work/bin"
  digest=$( {
    git ls-files -z -- src Cargo.toml Cargo.lock build.rs .cargo .sqlx migrations lua rules | xargs -0 sha256sum
    sha256sum "$patch"
  } | sha256sum | cut -d' ' -f1)
  if [ -x "$bin" ] && [ "$(cat "$bin.digest" 2>/dev/null)" = "$digest" ]; then
    echo "bench: the $name ceiling is built from these sources already" >&2
    return
  fi
  if [ ! -d "$ceilings_work/target/release" ] && [ -d target/release ]; then
    mkdir -p "$ceilings_work/target" && cp -a target/release "$ceilings_work/target/"
  fi
  rm -rf "$copy" && mkdir -p "$copy"
  git ls-files -z | xargs -0 cp --parents -t "$copy"
  # Exact hunks only (no fuzz, no questions): a patch that no longer fits is an error.
  (cd "$copy" && patch -p1 --batch --fuzz=0 --quiet <"$patch") ||
    { echo "bench: ${patch#"$here"/} no longer applies" >&2; exit 1; }
  echo "bench: building the $name ceiling" >&2
  (cd "$copy" && CARGO_TARGET_DIR="$here/$ceilings_work/target" cargo build --release --quiet --bin quiesce)
  cp "$ceilings_work/target/release/quiesce" "$bin"
  echo "$digest" >"$bin.digest"
}

# cpu_ticks PID...: the CPU clock ticks (user + system, `getconf CLK_TCK` a second) the processes
# used so far; a process gone counts 0.
cpu_ticks() {
  local total=0 pid
  for pid in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0))); done
  echo "$total"
}

# peer_deps NAME: a peer's npm dependencies (bench/peers/NAME/, pinned by its lock file).
peer_deps() {
  if [ ! -d "bench/peers/$1/node_modules" ]; then
    (cd "bench/peers/$1" && npm ci --no-audit --no-fund --silent)
  fi
}

# The private Redis servers of the cluster bench and the idle cost (bench/cluster/run.sh,
# bench/idle-cost/run.sh): a Redis Cluster of 3 masters and 3 replicas (scripts/dev/redis-cluster.sh,
# from QUIESCE_CLUSTER_PORT, default 7101) and a single node on the port after the cluster's,
# set as the cluster's nodes are (AOF every second, no RDB) so that the figures compare. Neither
# is the shared Redis: INFO counts only what the bench sends. Each is stopped on exit if this
# script started it.
cluster_first=${QUIESCE_CLUSTER_PORT:-7101}
node_port=${BENCH_NODE_PORT:-$((cluster_first + 6))}
node_dir=.local/bench-node
started_cluster=
started_node=

start_private_servers() {
  if ! redis-cli -p "$cluster_first" ping >/dev/null 2>&1; then started_cluster=1; fi
  eval "$(QUIESCE_CLUSTER_PORT=$cluster_first scripts/dev/redis-cluster.sh start)"
  cluster_url=$QUIESCE_CLUSTER_URL
  if [ -f "$node_dir/redis.pid" ] && kill -0 "$(cat "$node_dir/redis.pid")" 2>/dev/null; then
    kill "$(cat "$node_dir/redis.pid")"   # ours, left by an interrupted run
    for _ in $(seq 50); do redis-cli -p "$node_port" ping >/dev/null 2>&1 || break; sleep 0.1; done
  fi
  if redis-cli -p "$node_port" ping >/dev/null 2>&1; then
    echo "bench: port $node_port answers and is not the bench's node; set BENCH_NODE_PORT" >&2
    exit 1
  fi
  rm -rf "$node_dir" && mkdir -p "$node_dir"
  redis-server --port "$node_port" --bind 127.0.0.1 --daemonize yes --dir "$node_dir" \
    --appendonly yes --appendfsync everysec --save '' \
    --logfile redis.log --pidfile "$PWD/$node_dir/redis.pid" >/dev/null
  started_node=1
  for _ in $(seq 100); do redis-cli -p "$node_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  node_url="redis://127.0.0.1:$node_port"
}

stop_private_servers() {
  if [ -n "$started_node" ] && [ -f "$node_dir/redis.pid" ]; then
    kill "$(cat "$node_dir/redis.pid")" 2>/dev/null || true
    for _ in $(seq 50); do redis-cli -p "$node_port" ping >/dev/null 2>&1 || break; sleep 0.1; done
    rm -rf "$node_dir"
  fi
  if [ -n "$started_cluster" ]; then QUIESCE_CLUSTER_PORT=$cluster_first scripts/dev/redis-cluster.sh stop; fi
}

# every_node URL: every node of a Redis URL as host:port lines: the node, or every master and
# replica of a cluster (CLUSTER NODES on its first seed node), each with its role.
every_node() {
  local rest=${1#*://}
  rest=${rest#*@}
  rest=${rest%%/*}
  case $1 in
    redis+cluster://*)
      local seed=${rest%%,*}
      redis-cli -h "${seed%:*}" -p "${seed##*:}" cluster nodes |
        awk '$3 !~ /fail/ {split($2, a, "@"); role = ($3 ~ /master/) ? "master" : "replica"; print a[1], role}' | sort ;;
    *) echo "$rest master" ;;
  esac
}

# snapshot_nodes URL LABEL: INFO ALL of every node (one INFO call each, which the report
# subtracts) into $out/info/LABEL-<host:port>.txt, with the time it was taken. The nodes are
# listed once per URL (CLUSTER NODES), so no snapshot but the first sends more than INFO.
declare -A listed_nodes=()
snapshot_nodes() {
  mkdir -p "$out/info"
  [ -n "${listed_nodes[$1]:-}" ] || listed_nodes[$1]=$(every_node "$1")
  local node role
  while read -r node role; do
    {
      echo "# bench: role=$role at=$(date +%s.%N)"
      redis-cli -h "${node%:*}" -p "${node##*:}" info all | tr -d '\r'
    } >"$out/info/$2-$node.txt"
  done <<<"${listed_nodes[$1]}"
}

# count_prefix_keys URL PREFIX LABEL: how many keys of the prefix each primary holds, what
# MEMORY USAGE says they take and how many entities its shards' due sets hold, into
# $out/info/LABEL-keys.txt (host:port keys bytes due-members; the keys listed beside it).
count_prefix_keys() {
  mkdir -p "$out/info"
  local node pattern="{$2[:}]*"
  for node in $(redis_primaries "$1"); do
    local cli=(redis-cli -h "${node%:*}" -p "${node##*:}")
    "${cli[@]}" --scan --pattern "$pattern" >"$out/info/$3-keys-$node.list"
    local keys bytes=0 due=0 key size
    keys=$(wc -l <"$out/info/$3-keys-$node.list")
    while read -r key; do
      # Empty for a key gone since the SCAN (a lock that expired).
      size=$("${cli[@]}" memory usage "$key" samples 0)
      bytes=$((bytes + ${size:-0}))
      # A shard's due set (not the shard index, {prefix}:shards:due).
      case $key in "{$2:"*"}:due") due=$((due + $("${cli[@]}" zcard "$key"))) ;; esac
    done <"$out/info/$3-keys-$node.list"
    echo "$node $keys $bytes $due"
  done >"$out/info/$3-keys.txt"
}
