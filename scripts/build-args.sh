#!/usr/bin/env bash
# The Dockerfile's build args, from versions.json (K16) plus the git revision/source, one per line:
#
#   [APPLIANCE_CHANNEL=NAME] scripts/build-args.sh [--format flags|env|json]     (default: the default channel)
#
#   mapfile -t args < <(scripts/build-args.sh)
#   docker buildx build "${args[@]}" --build-arg FLASHINFER_INDEX_URL=... \
#       --platform linux/amd64,linux/arm64 --target gpu -t "$(scripts/build-args.sh --tag)" .
#
# `--tag` prints the image tag (appliance:<channel>-<channel lock digest 12>) instead.
# APPLIANCE_REVISION / APPLIANCE_SOURCE in the environment override what git says.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCKARGS="$HERE/../appliance/container/lockcli.py"
if [ "${1:-}" = "--tag" ]; then
    exec python3 "$LOCKARGS" image-tag
fi
exec python3 "$LOCKARGS" build-args "$@"
