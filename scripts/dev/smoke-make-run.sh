#!/usr/bin/env bash
# The quick start, checked: `make run` starts the service, then every command of the README runs
# as printed, in order, against it (tests/readme.rs), and `make clean-data` removes what it left.
# Uses its own database, Redis prefix and ports (the README's addresses are rewritten to them).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

port=${SMOKE_PORT:-$((20000 + RANDOM % 20000))}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
export QUIESCE_DATABASE_URL="${base_db%/*}/quiesce_smoke_$suffix"
export QUIESCE_REDIS_PREFIX="smoke-$suffix"
export QUIESCE_LISTEN="127.0.0.1:$port"
export QUIESCE_METRICS_LISTEN="127.0.0.1:$((port + 1))"
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
setsid make run >"$log" 2>&1 &
pid=$!

ready=
for _ in $(seq 600); do
  if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
[ -n "$ready" ] || fail "make run did not become ready on port $port; its output:"
grep -q "curl" "$log" || fail "make run did not print the example request; its output:"

README_API="http://127.0.0.1:$port" README_DATABASE_URL="$QUIESCE_DATABASE_URL" \
  cargo test -q --test readme -- --ignored every_readme_command_runs_as_printed ||
  fail "a README command failed (above); make run's output:"
echo "smoke: make run served every README command as printed"
echo "smoke: 1 passed, 0 failed"
