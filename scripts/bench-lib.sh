# Shared by scripts/bench.sh and scripts/ceilings.sh (sourced from the repository root, not
# run): quiesce servers on databases and Redis prefixes of their own, dropped when the run is
# done or on exit. The caller sets `out` (where server logs go) and may set `quiesce_bin`
# (default target/release/quiesce).
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
redis_url=${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
port=$((20000 + RANDOM % 20000))
loadgen=target/release/quiesce-loadgen
quiesce_bin=${quiesce_bin:-target/release/quiesce}
dbs=()
prefixes=()
server=

# drop_runs: drops the databases and Redis keys of every server started so far.
drop_runs() {
  for db in "${dbs[@]}"; do
    psql "${base_db%/*}/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
  for prefix in "${prefixes[@]}"; do
    redis-cli -u "$redis_url" --scan --pattern "{$prefix:*" | xargs -r redis-cli -u "$redis_url" del >/dev/null || true
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
  dbs+=("$db"); prefixes+=("$prefix")
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

# run_loadgen NAME [loadgen options...]: writes the JSON report to $out/NAME.json.
run_loadgen() {
  local name=$1; shift
  echo "bench: $name" >&2
  "$loadgen" --url "http://127.0.0.1:$port" --json --run-id "$name" "$@" >"$out/$name.json"
}

# The BullMQ peer's dependencies (npm, pinned by its lock file).
bullmq_deps() {
  if [ ! -d bench/peers/bullmq/node_modules ]; then
    (cd bench/peers/bullmq && npm ci --no-audit --no-fund --silent)
  fi
}
