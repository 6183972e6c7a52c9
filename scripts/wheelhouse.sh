#!/usr/bin/env bash
# Download wheels for the image's Python (CPython `python`, Linux x86_64, glibc `images.glibc` of
# versions.json's CPU channel: $APPLIANCE_CHANNEL, else default_cpu_channel; the CPU base image's Debian suite) into a directory that a Docker build installs from with
# `pip install --no-index --find-links`.
#
#   scripts/wheelhouse.sh DIR REQUIREMENT...      e.g. scripts/wheelhouse.sh build/wheels httpx torch
#
# A REQUIREMENT may also be `-r FILE` or `-c FILE` (passed through to pip).
# Skips the download when DIR already satisfies every requirement offline.
# torch: only the CPU build is allowed. A torch requirement is pinned to the torch version of
# versions.json plus "+cpu" (override: APPLIANCE_TORCH), found in ${APPLIANCE_WHEELS:-/opt/wheels}
# (a find-links dir); the script fails if any other torch wheel, or any nvidia-* CUDA library wheel,
# ends up in DIR.
set -euo pipefail

say() { printf '[wheelhouse.sh] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

[ "$#" -ge 2 ] || { echo "usage: $0 DIR REQUIREMENT..." >&2; exit 2; }
DIR="$1"; shift
LOCAL_WHEELS="${APPLIANCE_WHEELS:-/opt/wheels}"
PYTHON="${PYTHON:-python3}"
VERSIONS="${APPLIANCE_VERSIONS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/versions.json}"

# Versions come from versions.json (the only place a version is written), read by the stdlib-only helper
# the image build uses; env overrides them.
lock() {
    [ -s "$VERSIONS" ] || die "$VERSIONS not found: set APPLIANCE_TORCH, APPLIANCE_PY and APPLIANCE_GLIBC instead"
    "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/../appliance/container/lockcli.py" --versions "$VERSIONS" --target cpu "$@"
}
TORCH="${APPLIANCE_TORCH:-$(lock version torch)+cpu}"
PY="${APPLIANCE_PY:-$(lock get python)}"
GLIBC="${APPLIANCE_GLIBC:-$(lock get images.glibc)}"
case "$TORCH" in *+cpu) ;; *) die "torch must be a CPU build (+cpu), got $TORCH" ;; esac
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

# A bare `torch==X` would match both X (the index's, CUDA dependencies and all) and
# X+cpu; pin the local label so pip cannot pick the other one.
reqs=()
for r in "$@"; do
    name="$(printf '%s' "$r" | sed -E 's/^[[:space:]]*([A-Za-z0-9_.-]+).*/\1/' | tr '[:upper:]_.' '[:lower:]--')"
    if [ "$name" = torch ]; then
        say "pinning '$r' -> torch==$TORCH (CPU build)"
        r="torch==$TORCH"
    fi
    reqs+=("$r")
done

# pip (23.x at least) does NOT expand --platform manylinux_2_N to older glibc tags, so name every
# tag the base image's glibc runs: manylinux_2_N ... manylinux_2_5 and the legacy aliases.
[[ "$GLIBC" =~ ^2\.([0-9]+)$ ]] || die "glibc version '$GLIBC' is not 2.N"
target=(--only-binary=:all: --implementation cp --python-version "$PY" --abi "cp${PY//./}")
for minor in $(seq "${BASH_REMATCH[1]}" -1 5); do target+=(--platform "manylinux_2_${minor}_x86_64"); done
target+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
find_links=(--find-links "$DIR")
if [ -d "$LOCAL_WHEELS" ]; then find_links+=(--find-links "$LOCAL_WHEELS"); fi

say "checking whether $DIR already satisfies: ${reqs[*]}"
if "$PYTHON" -m pip download -q --no-index --find-links "$DIR" "${target[@]}" --dest "$DIR" "${reqs[@]}" >/dev/null 2>&1; then
    say "all requirements already in $DIR: nothing to download"
else
    say "pip download -> $DIR"
    "$PYTHON" -m pip download --progress-bar off "${find_links[@]}" "${target[@]}" --dest "$DIR" "${reqs[@]}"
fi

# Verify what was picked.
shopt -s nullglob
bad=()
for w in "$DIR"/torch-*.whl; do
    case "$(basename "$w")" in
        "torch-${TORCH}-"*) say "torch: $(basename "$w")" ;;
        *) bad+=("$w") ;;
    esac
done
# CUDA libraries (nvidia-cublas-*, nvidia-nccl-*, ...) mean a CUDA torch crept in. nvidia-ml-py is
# NVML's pure-Python binding (an appliance dependency), not CUDA. triton comes in through xgrammar's
# Linux requirement; the images uninstall it right after installing (as scripts/install-engine.sh does).
for w in "$DIR"/nvidia_*.whl "$DIR"/nvidia-*.whl; do
    case "$(basename "$w")" in nvidia_ml_py-*) ;; *) bad+=("$w") ;; esac
done
if [ "${#bad[@]}" -gt 0 ]; then
    die "non-CPU torch stack in $DIR: ${bad[*]##*/} (remove them; torch must be $TORCH)"
fi
count=$(find "$DIR" -maxdepth 1 -name '*.whl' | wc -l)
say "wheelhouse $DIR: $count wheels, $(du -sh "$DIR" | cut -f1)"
