#!/usr/bin/env bash
# `make slow-clients`: 600 slow, unauthenticated connections (stalled uploads to an unknown source
# and to /v1/events without a token, header lines trickled every 3 s), re-opened as the server
# closes them, against a release `quiesce serve` with default HTTP settings, tokens and an inbound
# secret; one signed, authenticated sender posts beside them. Figures for SECURITY.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=.local/slow-clients
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh
ulimit -n 8192 2>/dev/null || true

echo "slow-clients: building (release)" >&2
cargo build --release --quiet --bin quiesce
token="edge-ingest-token-$suffix"
digest=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
secret="whsec_$(head -c 24 /dev/urandom | base64)"
# start_server runs with --insecure-dev and generous limits for the bench; this run wants the
# defaults, so it starts its own server the same way, on a database and prefix of its own.
db="quiesce_edge_$suffix" prefix="edge-$suffix"
dbs+=("$db"); prefixes+=("$prefix")
QUIESCE_DATABASE_URL="${base_db%/*}/$db" QUIESCE_REDIS_URL="$redis_url" QUIESCE_REDIS_PREFIX="$prefix" \
  QUIESCE_LISTEN="127.0.0.1:$port" QUIESCE_METRICS_LISTEN=off \
  QUIESCE_API_TOKENS="ingest:$digest" QUIESCE_INBOUND_SECRETS="$secret" RUST_LOG=warn \
  "$quiesce_bin" serve >"$out/server.log" 2>&1 &
server=$!
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
  sleep 0.1
done
SLOW=${SLOW:-600} SECONDS_RUN=${SECONDS_RUN:-60} \
  python3 bench/slow-clients/slow_clients.py 127.0.0.1 "$port" "$token" "$secret" | tee "$out/report.json"
