#!/usr/bin/env bash
# The quick start, checked: `make run` starts the service, and the README's example request
# gets 202. Uses its own database, Redis prefix and port, and cleans up after itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

port=${SMOKE_PORT:-$((20000 + RANDOM % 20000))}
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
export QUIESCE_DATABASE_URL="${base_db%/*}/quiesce_smoke_$suffix"
export QUIESCE_REDIS_PREFIX="smoke-$suffix"
export QUIESCE_LISTEN="127.0.0.1:$port"
export QUIESCE_METRICS_LISTEN="127.0.0.1:$((port + 1))"
log=$(mktemp)

cleanup() {
  if [ -n "${pid:-}" ]; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  psql "${base_db%/*}/postgres" -qc "DROP DATABASE IF EXISTS quiesce_smoke_$suffix WITH (FORCE)" >/dev/null 2>&1 || true
  if command -v redis-cli >/dev/null; then
    redis-cli -u "${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}" --scan --pattern "{smoke-$suffix:*" |
      xargs -r redis-cli -u "${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}" del >/dev/null || true
  fi
  if [ -n "${QUIESCE_TEST_LOG_DIR:-}" ] && [ -d "$QUIESCE_TEST_LOG_DIR" ]; then
    cp "$log" "$QUIESCE_TEST_LOG_DIR/make-run.log" || true
  fi
  rm -f "$log"
}
trap cleanup EXIT

# Build first, so that the readiness deadline below measures the server, not the compiler
# (`make run` builds without the dev-dependencies' features, which can mean a long rebuild).
cargo build --bin quiesce
setsid make run >"$log" 2>&1 &
pid=$!

ready=
for _ in $(seq 600); do
  if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "smoke: make run did not become ready on port $port; its output:" >&2
  cat "$log" >&2
  echo "smoke: 0 passed, 1 failed"
  exit 1
fi

grep -q "curl" "$log" || { echo "smoke: make run did not print the example request" >&2; cat "$log" >&2; echo "smoke: 0 passed, 1 failed"; exit 1; }

request=$(scripts/example-request.sh --raw | sed 's/^curl /curl -s -o \/dev\/stderr -w "%{http_code}" /')
status=$(bash -c "$request" 2>/dev/null)
if [ "$status" != "202" ]; then
  echo "smoke: the README's example request got HTTP $status, expected 202" >&2
  cat "$log" >&2
  echo "smoke: 0 passed, 1 failed"
  exit 1
fi
echo "smoke: make run served the README example with 202"
echo "smoke: 1 passed, 0 failed"
