#!/usr/bin/env bash
# Prints the README's example request and the read that follows it (the blocks between the
# example-request and example-read markers), with the address quiesce will listen on: the
# banner of `make run` shows the commands the README shows.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
listen=${QUIESCE_LISTEN:-127.0.0.1:8080}

# The commands of the README's block between `<!-- NAME:start -->` and `<!-- NAME:end -->`.
block() {
  sed -n "/<!-- $1:start -->/,/<!-- $1:end -->/p" "$root/README.md" |
    sed -e '/^<!--/d' -e '/^```/d' -e "s#http://127.0.0.1:8080#http://$listen#g"
}
example=$(block example-request)
read_back=$(block example-read)
if [ "${1:-}" = "--raw" ]; then
  printf '%s\n%s\n' "$example" "$read_back"
  exit 0
fi
cat <<MSG

quiesce is starting on http://$listen with the default rules, in --insecure-dev mode: no API
tokens and no inbound signatures (never expose it like this). In another terminal, try:

$example

then read the entity back:

$read_back
MSG
