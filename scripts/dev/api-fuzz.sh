#!/usr/bin/env bash
# schemathesis against a live `quiesce serve`: every operation of /openapi.json with generated
# valid and invalid input. Fails on a 5xx, a crash, an undocumented status, header or content
# type, or a response that breaks the documented schema. The server runs with API tokens (the
# run sends the admin token; auth checks send none or a bad one) and a named source whose
# secret the run does not know, on its own database, Redis prefix and port.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

examples=${API_FUZZ_EXAMPLES:-100}
seed=${API_FUZZ_SEED:-20261130}
venv=.local/schemathesis
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r scripts/dev/api-fuzz-requirements.txt
fi

source scripts/dev/free-port.sh
port=$(free_port)
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
base_db=${QUIESCE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/quiesce}
token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
token_hash=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
export QUIESCE_DATABASE_URL="${base_db%/*}/quiesce_fuzz_$suffix"
export QUIESCE_REDIS_PREFIX="fuzz-$suffix"
export QUIESCE_LISTEN="127.0.0.1:$port"
export QUIESCE_METRICS_LISTEN=off
export QUIESCE_API_TOKENS="admin:$token_hash"
export QUIESCE_SOURCES="shop=whsec_$(head -c 24 /dev/urandom | base64)"
export QUIESCE_RATE_LIMIT=1000000 QUIESCE_RATE_BURST=1000000
export QUIESCE_DEBOUNCE_WINDOW=50ms QUIESCE_MAX_WAIT=1s
export RUST_LOG=warn
log=$(mktemp)
report=$(mktemp -d)

cleanup() {
  if [ -n "${pid:-}" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  psql "${base_db%/*}/postgres" -qc "DROP DATABASE IF EXISTS quiesce_fuzz_$suffix WITH (FORCE)" >/dev/null 2>&1 || true
  if command -v redis-cli >/dev/null; then
    redis-cli -u "${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}" --scan --pattern "{fuzz-$suffix[:}]*" |
      xargs -r redis-cli -u "${QUIESCE_REDIS_URL:-redis://127.0.0.1:6379}" del >/dev/null || true
  fi
  rm -rf "$log" "$report"
}
trap cleanup EXIT

# Tokens are enforced; inbound signatures on /v1/events are not configured, so the run reaches
# the event parser (the named source's endpoint stays signed).
./target/debug/quiesce serve --insecure-dev >"$log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.2
done

status=0
"$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json" \
  --checks all \
  --exclude-checks positive_data_acceptance \
  --max-examples "$examples" --seed "$seed" \
  --generation-database none --no-color \
  --header "Authorization: Bearer $token" \
  --report ndjson --report-dir "$report" || status=$?

if ! kill -0 "$pid" 2>/dev/null; then
  echo "api-fuzz: the server died during the run; its log:" >&2
  cat "$log" >&2
  exit 1
fi
if grep -qiE "panicked|thread .* panicked" "$log"; then
  echo "api-fuzz: the server panicked:" >&2
  grep -iE -A5 "panicked" "$log" >&2
  exit 1
fi
exit "$status"
