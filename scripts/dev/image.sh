#!/usr/bin/env bash
# make image: quiesce as a container image, with no base image to download.
#
# 1. A static release build for x86_64-unknown-linux-musl (the target is added with rustup, and
#    Debian's musl-tools give musl-gcc for the C parts: mimalloc, ring).
# 2. An image assembled from scratch with buildah: the binary, the CA certificates, the default
#    rules, a passwd entry for the non-root user it runs as; `serve` by default, `worker` or
#    `migrate` as the argument; `quiesce healthcheck` as its health command (kept in the docker
#    image format: the OCI format has no health command).
# 3. The image checked: its config read back with `podman image inspect`, then, where podman
#    can run containers, run against this machine's Redis and Postgres (host network) with a
#    database and key prefix of its own: it must turn healthy and take an event, which the API
#    then shows. Both are dropped afterwards.
#
# IMAGE (default quiesce:latest) names the image. QUIESCE_IMAGE_RUN=0 skips the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
image=${IMAGE:-quiesce:latest}
target=x86_64-unknown-linux-musl
say() { echo "image: $*" >&2; }

need() { # need COMMAND PACKAGE
  command -v "$1" >/dev/null && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing $2 from the distribution's packages"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
  else
    say "$1 not found: install $2 (Debian/Ubuntu: sudo apt-get install $2)"
    exit 1
  fi
}
need musl-gcc musl-tools
need buildah buildah
need podman podman
rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2

say "static release build ($target)"
CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release --locked --target "$target" --bin quiesce >&2
binary="target/$target/release/quiesce"
if file "$binary" | grep -q 'dynamically linked'; then
  say "$binary is dynamically linked: not usable from scratch"
  exit 1
fi

work=$(mktemp -d)
container=
cleanup() {
  [ -n "$container" ] && buildah rm "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
printf 'root:x:0:0:root:/:/sbin/nologin\nquiesce:x:10001:10001:quiesce:/nonexistent:/sbin/nologin\n' > "$work/passwd"
printf 'root:x:0:\nquiesce:x:10001:\n' > "$work/group"

container=$(buildah from scratch)
buildah copy --chmod 0755 "$container" "$binary" /usr/local/bin/quiesce >/dev/null
buildah copy --chmod 0644 "$container" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
buildah copy --chmod 0644 "$container" rules/default.toml /etc/quiesce/rules.toml >/dev/null
buildah copy --chmod 0644 "$container" "$work/passwd" /etc/passwd >/dev/null
buildah copy --chmod 0644 "$container" "$work/group" /etc/group >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
buildah config \
  --user 10001:10001 \
  --workingdir / \
  --entrypoint '["/usr/local/bin/quiesce"]' \
  --cmd serve \
  --env QUIESCE_LISTEN=0.0.0.0:8080 \
  --env QUIESCE_METRICS_LISTEN=0.0.0.0:9464 \
  --env QUIESCE_RULES=/etc/quiesce/rules.toml \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --port 8080 --port 9464 \
  --healthcheck 'CMD /usr/local/bin/quiesce healthcheck' \
  --healthcheck-interval 10s --healthcheck-timeout 3s --healthcheck-start-period 30s --healthcheck-retries 3 \
  --label org.opencontainers.image.title=quiesce \
  --label "org.opencontainers.image.version=$version" \
  --label org.opencontainers.image.description="Moderation debounce scheduler" \
  "$container"
buildah commit --quiet --format docker --rm "$container" "$image" >/dev/null
container=

# The image as built: its config and size.
inspect=$(podman image inspect "$image")
check() { # check JQ-LIKE-PYTHON-EXPRESSION WHAT
  python3 -c "import json,sys; i=json.load(sys.stdin)[0]; sys.exit(0 if ($1) else 1)" <<<"$inspect" \
    || { say "the image's $2 is not as built"; exit 1; }
}
check "i['Config']['User'] == '10001:10001'" "user"
check "i['Config']['Entrypoint'] == ['/usr/local/bin/quiesce'] and i['Config']['Cmd'] == ['serve']" "entrypoint and command"
check "i['Healthcheck']['Test'] == ['CMD', '/usr/local/bin/quiesce', 'healthcheck']" "health command"
check "'QUIESCE_RULES=/etc/quiesce/rules.toml' in i['Config']['Env']" "environment"
size=$(python3 -c "import json,sys; print(json.load(sys.stdin)[0]['Size'])" <<<"$inspect")
say "built $image: $size bytes ($(numfmt --to=iec "$size")), user 10001, health command quiesce healthcheck"

[ "${QUIESCE_IMAGE_RUN:-1}" = 0 ] && exit 0

# Whether podman can run containers here, as configured; else with runc and cgroupfs (a host
# whose cgroups crun refuses, such as a hybrid hierarchy inside another container). When
# neither can, say why: the image was still checked above.
limits=(--ulimit nofile=8192:8192 --ulimit nproc=4096:4096)
podman_run=(podman)
if ! why=$(podman run --rm "${limits[@]}" "$image" --version 2>&1); then
  need runc runc
  podman_run=(podman --runtime runc --cgroup-manager cgroupfs)
  if ! why_runc=$("${podman_run[@]}" run --rm "${limits[@]}" "$image" --version 2>&1); then
    say "podman cannot run containers here, so the image was inspected, not run:"
    say "  with its default runtime: $(tail -n 1 <<<"$why")"
    say "  with runc and cgroupfs: $(tail -n 1 <<<"$why_runc")"
    exit 0
  fi
  say "podman runs containers here with runc and cgroupfs (its default runtime: $(tail -n 1 <<<"$why"))"
fi

# Run it against this machine's services, on a database and prefix of its own.
eval "$(scripts/dev/services.sh)"
run_id="image-$$-$(date +%s)"
base_db=${QUIESCE_DATABASE_URL%/*}
database_url="$base_db/quiesce_$(tr - _ <<<"$run_id")"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
name="quiesce-$run_id"
stop() {
  "${podman_run[@]}" rm -f "$name" >/dev/null 2>&1 || true
  QUIESCE_DATABASE_URL="$database_url" QUIESCE_REDIS_PREFIX="$run_id" scripts/dev/clean-data.sh >&2 || true
}
trap 'stop; cleanup' EXIT
"${podman_run[@]}" run -d --name "$name" --network host "${limits[@]}" \
  -e QUIESCE_DATABASE_URL="$database_url" -e QUIESCE_REDIS_URL="$QUIESCE_REDIS_URL" \
  -e QUIESCE_REDIS_PREFIX="$run_id" -e QUIESCE_INSECURE_DEV=true \
  -e QUIESCE_LISTEN="127.0.0.1:$port" -e QUIESCE_METRICS_LISTEN="127.0.0.1:$metrics_port" \
  -e QUIESCE_DEBOUNCE_WINDOW=200ms \
  "$image" >/dev/null
for _ in $(seq 1 60); do
  "${podman_run[@]}" healthcheck run "$name" >/dev/null 2>&1 && break
  sleep 1
done
if ! "${podman_run[@]}" healthcheck run "$name" >/dev/null 2>&1; then
  "${podman_run[@]}" logs "$name" >&2 || true
  say "the container never turned healthy"
  exit 1
fi
answer=$(curl -s -w ' %{http_code}' -X POST "http://127.0.0.1:$port/v1/events" -H 'content-type: application/json' \
  -d '{"id":"image-smoke-1","entity":"post:image","type":"flag"}')
case $answer in
  *' 202') ;;
  *) "${podman_run[@]}" logs "$name" >&2 || true; say "POST /v1/events answered: $answer"; exit 1 ;;
esac
entity=$(curl -s "http://127.0.0.1:$port/v1/entities/post:image")
python3 -c "import json,sys; e=json.loads(sys.argv[1]); sys.exit(0 if e['event_count'] == 1 else 1)" "$entity" \
  || { say "the entity does not show its event: $entity"; exit 1; }
say "ran $image against this machine's Redis and Postgres: healthy, an event taken (202) and read back"
