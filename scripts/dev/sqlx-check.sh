#!/usr/bin/env bash
# Checks that .sqlx/ (the query data every build type-checks the SQL against, offline) matches
# the statements in the code and the schema the migrations make; with --prepare, regenerates it.
#
# Creates a uniquely named scratch database on the Postgres that scripts/dev/services.sh finds,
# applies the migrations, runs `cargo sqlx prepare [--check] -- --all-targets` against it and
# drops the database on exit. Installs sqlx-cli first if `cargo sqlx` is missing.
# `make sqlx-check` runs the check (CI does too); `make sqlx-prepare` the regeneration.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

mode=check
case "${1:-}" in
  "") ;;
  --prepare) mode=prepare ;;
  *) echo "usage: $0 [--prepare]" >&2; exit 2 ;;
esac

say() { echo "sqlx-check: $*" >&2; }

if ! cargo sqlx --version >/dev/null 2>&1; then
  say "installing sqlx-cli 0.8.6 (cargo sqlx)"
  cargo install sqlx-cli --version 0.8.6 --locked --no-default-features --features postgres,rustls
fi

eval "$(scripts/dev/services.sh)"

# The server of QUIESCE_DATABASE_URL: its database name is replaced, its parameters are kept.
server_url=${QUIESCE_DATABASE_URL%%\?*}
parameters=${QUIESCE_DATABASE_URL#"$server_url"}
server_url=${server_url%/*}
database="quiesce_sqlx_${mode}_$$_$(date +%s)"
database_url="$server_url/$database$parameters"

drop_database() {
  cargo sqlx database drop -y --force --database-url "$database_url" >/dev/null 2>&1 ||
    say "could not drop the scratch database $database; drop it by hand"
}
trap drop_database EXIT

say "scratch database $database"
cargo sqlx database create --database-url "$database_url"
cargo sqlx migrate run --source migrations --database-url "$database_url" >/dev/null

if [ "$mode" = prepare ]; then
  DATABASE_URL=$database_url SQLX_OFFLINE=false cargo sqlx prepare -- --all-targets
  exit 0
fi

output=$(mktemp)
trap 'rm -f "$output"; drop_database' EXIT
DATABASE_URL=$database_url SQLX_OFFLINE=false cargo sqlx prepare --check -- --all-targets |
  tee "$output"
# prepare --check only warns about query files no statement uses any more: left behind, they
# would pass for data the build relies on.
if grep -q "potentially unused queries" "$output"; then
  say ".sqlx/ holds query data no statement uses; run make sqlx-prepare and commit .sqlx/"
  exit 1
fi
say ".sqlx/ matches the statements and the migrations"
