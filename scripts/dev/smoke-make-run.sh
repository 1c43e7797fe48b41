#!/usr/bin/env bash
# The quick start, checked: `make run` starts the service, then every command of the README and of
# every page of docs/ runs as printed, in the order docs/README.md states, against it
# (tests/readme.rs), and `make clean-data` removes what it left. Uses its own database, Redis
# prefix and ports (the pages' addresses are rewritten to them).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

# A port that is taken all the same by the time make run binds it is replaced by another (below).
source scripts/dev/free-port.sh
port=${SMOKE_PORT:-$(free_port)}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
export QUIESCE_DATABASE_URL="${base_db%/*}/quiesce_smoke_$suffix"
export QUIESCE_REDIS_PREFIX="smoke-$suffix"
log=$(mktemp)

fail() {
  echo "smoke: $*" >&2
  cat "$log" >&2
  echo "smoke: 0 passed, 1 failed"
  exit 1
}

cleanup() {
  if [ -n "${pid:-}" ]; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  # The README's own clean-up, on this run's database and prefix.
  make -s clean-data >/dev/null || echo "smoke: make clean-data failed" >&2
  if [ -n "${QUIESCE_TEST_LOG_DIR:-}" ] && [ -d "$QUIESCE_TEST_LOG_DIR" ]; then
    cp "$log" "$QUIESCE_TEST_LOG_DIR/make-run.log" || true
  fi
  rm -f "$log"
}
trap cleanup EXIT

# Build first (make run builds the same), so that the readiness deadline below measures the
# server, not the compiler.
make -s build

# Starts make run on $port and waits (deadline 120 s) until it is ready or has exited.
start_make_run() {
  export QUIESCE_LISTEN="127.0.0.1:$port"
  export QUIESCE_METRICS_LISTEN="127.0.0.1:$((port + 1))"
  setsid make run >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -TERM -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
  return 1
}

ready=
for attempt in 1 2 3; do
  if start_make_run; then ready=1; break; fi
  # Another process held the port between the pick and the bind: try another one.
  grep -q "Address already in use" "$log" && [ -z "${SMOKE_PORT:-}" ] || break
  echo "smoke: port $port or $((port + 1)) was taken (attempt $attempt); trying another" >&2
  port=$(free_port)
done
[ -n "$ready" ] || fail "make run did not become ready on port $port; its output:"
# The banner shows the README's example request and read, line for line, at this run's address.
while IFS= read -r line; do
  grep -qxF -- "$line" "$log" ||
    fail "make run's banner lacks the README's example line: $line; its output:"
done < <(scripts/dev/example-request.sh --raw)

README_API="http://127.0.0.1:$port" README_METRICS="http://127.0.0.1:$((port + 1))" \
  README_DATABASE_URL="$QUIESCE_DATABASE_URL" \
  cargo test -q --test readme -- --ignored every_documented_command_runs_as_printed ||
  fail "a command of the README or docs/ failed (above); make run's output:"
echo "smoke: make run served every command of the README and docs/ as printed"
echo "smoke: 1 passed, 0 failed"
