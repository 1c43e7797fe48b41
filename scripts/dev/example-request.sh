#!/usr/bin/env bash
# Prints the README's example request (the block between the example-request markers), with
# the address quiesce will listen on.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
listen=${QUIESCE_LISTEN:-127.0.0.1:8080}
example=$(sed -n '/<!-- example-request:start -->/,/<!-- example-request:end -->/p' "$root/README.md" |
  sed -e '/^<!--/d' -e '/^```/d' -e "s#http://127.0.0.1:8080#http://$listen#g")
if [ "${1:-}" = "--raw" ]; then
  printf '%s\n' "$example"
  exit 0
fi
cat <<MSG

quiesce is starting on http://$listen with the default rules, in --insecure-dev mode: no API
tokens and no inbound signatures (never expose it like this). In another terminal, try:

$example

then read the entity back:  curl -s http://$listen/v1/entities/post:9842
MSG
