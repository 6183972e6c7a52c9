#!/usr/bin/env bash
# The Dockerfile's build args, from versions.json (K16) plus the git revision/source, one per line:
#
#   scripts/build-args.sh [--target gpu|cpu|all] [--format flags|env|json]
#
#   mapfile -t args < <(scripts/build-args.sh)
#   docker buildx build "${args[@]}" --build-arg FLASHINFER_INDEX_URL=... \
#       --platform linux/amd64,linux/arm64 --target gpu -t "$(scripts/build-args.sh --tag gpu)" .
#
# `--tag gpu|cpu` prints the image tag (appliance:<target>-<lock digest 12>) instead.
# APPLIANCE_REVISION / APPLIANCE_SOURCE in the environment override what git says.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCKARGS="$HERE/../appliance/container/lockcli.py"
if [ "${1:-}" = "--tag" ]; then
    exec python3 "$LOCKARGS" image-tag --target "${2:?usage: $0 --tag gpu|cpu}"
fi
exec python3 "$LOCKARGS" build-args "$@"
