#!/usr/bin/env bash
# Build the CPU image of the appliance, offline, in one command:
#
#   scripts/build-cpu-image.sh            -> appliance:<cpu channel>-<its lock digest 12> (printed on the last line)
#
# 1. a Docker daemon: $DOCKER_HOST when it answers, else the private one of scripts/dockerd.sh
#    (started and left running; stop it with `scripts/dockerd.sh stop`)
# 2. the base image (scripts/make-base-image.sh: debootstrap + docker import, cached)
# 3. the wheelhouse, host side (scripts/wheelhouse.sh), cached under $APPLIANCE_CACHE keyed by its
#    requirement list, then hard-linked into build/wheelhouse-cpu/ (the only place the build reads it)
# 4. `--target cpu` of the Dockerfile with BuildKit, args from versions.json (scripts/build-args.sh)
#
# Idempotent: a second run reuses the base image, the wheelhouse and Docker's layer cache (seconds).
# Env: APPLIANCE_CACHE (default /var/cache/appliance), APPLIANCE_IMAGE (tag override),
#      APPLIANCE_BUILD_TIMEOUT (seconds, default 3600), APPLIANCE_BUILD_LOG (default: stderr).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${APPLIANCE_CACHE:-/var/cache/appliance}"
LOCKARGS=(python3 "$REPO/appliance/container/lockcli.py" --versions "$REPO/versions.json" --target cpu)  # $APPLIANCE_CHANNEL, else the default CPU channel
TIMEOUT="${APPLIANCE_BUILD_TIMEOUT:-3600}"
T0=$SECONDS

say() { printf '[build-cpu-image.sh] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
step() { say "$* (+$((SECONDS - T0))s)"; }

# --- 1. daemon ------------------------------------------------------------------------------
if [ -n "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
    step "Docker daemon at $DOCKER_HOST"
else
    step "no daemon answers at ${DOCKER_HOST:-<unset>}: starting the private one"
    "$REPO/scripts/dockerd.sh" start
    eval "$("$REPO/scripts/dockerd.sh" env)"
fi
export DOCKER_HOST

# A docker CLI that builds with BuildKit: buildx when present, else a CLI older than 23 that still
# has the built-in BuildKit client (Debian's docker.io 20.10 at /usr/bin/docker).
builder=()
if docker buildx version >/dev/null 2>&1; then
    builder=(docker buildx build --load)
else
    for cli in "$(command -v docker)" /usr/bin/docker; do
        [ -x "$cli" ] || continue
        major="$("$cli" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)"
        if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -lt 23 ]; then
            builder=(env DOCKER_BUILDKIT=1 "$cli" build)
            break
        fi
    done
fi
[ "${#builder[@]}" -gt 0 ] || die "no BuildKit-capable docker CLI (need buildx, or docker.io's 20.10 CLI at /usr/bin/docker)"

# --- 2. base image --------------------------------------------------------------------------
base="$("${LOCKARGS[@]}" get images.base)"
step "base image $base"
"$REPO/scripts/make-base-image.sh" "$base"

# --- 3. wheelhouse --------------------------------------------------------------------------
lockdir="$(mktemp -d)"
trap 'rm -rf "$lockdir"' EXIT
"${LOCKARGS[@]}" lock-files --pyproject "$REPO/pyproject.toml" --dir "$lockdir"
cat "$lockdir/requirements.txt" "$lockdir/appliance.txt" "$lockdir/build-only.txt" >"$lockdir/with-deps.txt"
py="$("${LOCKARGS[@]}" get python)"
key="$(cat "$lockdir/with-deps.txt" "$lockdir/no-deps.txt" "$lockdir/constraints.txt" <(echo "cp$py") \
    "$REPO/scripts/wheelhouse.sh" | sha256sum | cut -c1-12)"
house="$CACHE/wheelhouse-cpu-$key"
if [ -f "$house/.complete" ]; then
    step "wheelhouse $house (cached)"
else
    step "wheelhouse $house: downloading"
    mkdir -p "$CACHE"
    rm -rf "$house.part"
    # Seed from the newest earlier wheelhouse: pip download skips the files already there.
    prev="$(ls -td "$CACHE"/wheelhouse-cpu-*/.complete 2>/dev/null | head -n 1 || true)"
    if [ -n "$prev" ]; then cp -al "$(dirname "$prev")" "$house.part"; rm -f "$house.part/.complete"; fi
    "$REPO/scripts/wheelhouse.sh" "$house.part" -r "$lockdir/with-deps.txt" -c "$lockdir/constraints.txt"
    "$REPO/scripts/wheelhouse.sh" "$house.part" --no-deps -r "$lockdir/no-deps.txt"
    touch "$house.part/.complete"
    rm -rf "$house"
    mv "$house.part" "$house"
    for old in "$CACHE"/wheelhouse-cpu-*; do
        [ "$old" = "$house" ] || { say "removing the older wheelhouse $old"; rm -rf "$old"; }
    done
fi
ctx_house="$REPO/build/wheelhouse-cpu"
if [ "$(cat "$ctx_house/.key" 2>/dev/null)" != "$key" ]; then
    step "linking the wheelhouse into $ctx_house"
    rm -rf "$ctx_house"
    mkdir -p "$(dirname "$ctx_house")"
    cp -al "$house" "$ctx_house" 2>/dev/null || cp -a "$house" "$ctx_house"
    echo "$key" >"$ctx_house/.key"
fi

# --- 4. build -------------------------------------------------------------------------------
tag="${APPLIANCE_IMAGE:-$("${LOCKARGS[@]}" image-tag)}"
mapfile -t args < <("${LOCKARGS[@]}" build-args)
step "building $tag with: ${builder[*]}"
log="${APPLIANCE_BUILD_LOG:-/dev/stderr}"
if ! timeout "$TIMEOUT" "${builder[@]}" --progress plain --network host --target cpu "${args[@]}" \
        -f "$REPO/Dockerfile" -t "$tag" "$REPO" >>"$log" 2>&1; then
    [ "$log" = /dev/stderr ] || tail -n 60 "$log" >&2
    die "docker build failed${log:+ (log: $log)}"
fi
# CPU images of other locks are stale stacks, and earlier builds of this tag left untagged images
# behind: drop both (CPU images of this appliance only; nothing else on the daemon is touched).
while read -r ref; do
    [ "$ref" = "$tag" ] || { say "removing the stale $ref"; docker image rm "$ref" >/dev/null || true; }
done < <(docker image ls --filter "label=appliance.target=cpu" --format '{{.Repository}}:{{.Tag}}' \
    | grep -E '^appliance:cpu-[0-9a-f]{12}$' || true)
docker image prune -f --filter "label=appliance.target=cpu" >/dev/null || true
size="$(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.2f GB", $1/1e9}')"
step "built $tag ($size)"
echo "$tag"
