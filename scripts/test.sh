#!/usr/bin/env bash
# The test suite on a fresh machine: install the CPU engine and test tools, start a private Docker
# engine for the container tests, run pytest, stop the engine by PID.
#
#   scripts/test.sh                 # everything (unit, real CPU engine, container)
#   scripts/test.sh -m "not docker" # pytest arguments pass through
#   scripts/test.sh --quick         # before a commit: no engine, no Docker, no rehearsal (docs/testing.md)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="${APPLIANCE_VENV:-$REPO/.venv}"
# Two pytest-xdist workers, a test file per work unit, the slow files first (tests/scheduling.py says why and how);
# APPLIANCE_TEST_WORKERS=0 runs in one process.
workers=(-n "${APPLIANCE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)

if [[ "${1:-}" == "--quick" ]]; then
  # Needs only `pip install -e '.[test]'` in $VENV: installs nothing, starts nothing. The `engine` marker is derived
  # from the fixtures a test uses (tests/conftest.py), so leaving it out leaves out every test that needs vLLM.
  shift
  "$VENV/bin/ruff" check appliance tests benchmarks tooling
  quick=(-m "not engine and not docker and not rehearsal and not gpu_stack_install")
  exec "$VENV/bin/python" -m pytest -ra "${workers[@]}" "${quick[@]}" "$@"
fi

# Free disk, checked first: the offline bundle test writes ~9 GB (the bundle, docker save's scratch, what apply
# unpacks), a channel whose lock digest changed reinstalls a ~5.5 GB CUDA venv. A run that starts short fails here in
# seconds, naming what to clear, instead of 45 minutes in on ENOSPC.
need_gb="${APPLIANCE_TEST_MIN_FREE_GB:-15}"
for where in "$REPO" "${XDG_CACHE_HOME:-$HOME/.cache}" "${TMPDIR:-/tmp}"; do
  mkdir -p "$where"
  free_gb=$(df --output=avail -B1G "$where" | tail -1 | tr -d ' ')
  if ((free_gb < need_gb)); then
    echo "scripts/test.sh: error: $where has ${free_gb} GB free; the suite needs ${need_gb} GB (APPLIANCE_TEST_MIN_FREE_GB)" >&2
    echo "  fix: free space there (stale stacks in ~/.cache/appliance-channels, old pytest folders in /tmp/pytest-of-$(id -un)," >&2
    echo "       'docker builder prune' on the private engine) or point TMPDIR / XDG_CACHE_HOME at a larger disk" >&2
    echo "  why: the bundle and channel tests write several GB each; a full disk fails them late and looks like a bug" >&2
    exit 2
  fi
done

scripts/install-engine.sh
# Debian packages the tests use: promtool and the server (prometheus) lint the exporter's /metrics, test the alert
# rules and run the monitoring bundle against the CPU serve (tests/test_health_metrics_lint.py,
# tests/test_monitoring_*.py); chromium opens the receipt report headless for its screenshot (tests/test_gate_report.py);
# rsync moves weights between ranks (tests/test_weights_sync.py); unshare and ip (util-linux, iproute2) cut the network
# for the offline bundle (tests/test_bundle_offline.py); shellcheck checks the release workflow's scripts under
# actionlint (tests/test_release_workflow.py).
missing=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if ((${#missing[@]})); then
  sudo_=""; [[ $(id -u) == 0 ]] || sudo_=sudo
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

started_docker=0
if [[ "${APPLIANCE_TEST_DOCKER:-1}" == "1" ]]; then
  # Stop only a daemon this run started; one that was already running stays.
  if ! scripts/dockerd.sh status >/dev/null 2>&1; then
    scripts/dockerd.sh start
    started_docker=1
  fi
  eval "$(scripts/dockerd.sh env)"
fi
cleanup() { if [[ $started_docker == 1 ]]; then scripts/dockerd.sh stop || true; fi; }
trap cleanup EXIT

"$VENV/bin/ruff" check appliance tests benchmarks tooling
leave_out=()
if [[ "${APPLIANCE_TEST_DOCKER:-1}" != "1" ]]; then
  leave_out+=(docker)  # no daemon started: the container tests are left out, and said so by pytest
fi
# The GPU-stack install rehearsal (~10 GB, ~11 min here) runs when versions.json, the Dockerfile, pyproject.toml
# or the rehearsal changed since its last passing install, whose key and venv are kept in this cache (outside
# the clone, so CI's fresh clones on one machine share it; a new machine has none and installs).
# Resolution and vLLM 0.27.1's parser run in every run (docs/gpu-rehearsal.md).
export APPLIANCE_REHEARSAL_CACHE="${APPLIANCE_REHEARSAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-gpu-rehearsal}"
# The channel rehearsal (tooling/channel_rehearsal.py, marker `rehearsal`): every channel's engine installed once per
# channel lock digest into this cache (outside the clone too), its facts, parser and log lines checked in every run;
# a step whose inputs did not change since it passed is skipped (docs/channels.md).
export APPLIANCE_CHANNELS_CACHE="${APPLIANCE_CHANNELS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance-channels}"
# The engine store of `appliance upgrade` (appliance/channels/engines.py): the same layout as the rehearsal's cache,
# so both share one install per channel lock digest (the upgrade tests serve the older CPU channel from it).
export APPLIANCE_ENGINES="${APPLIANCE_ENGINES:-$APPLIANCE_CHANNELS_CACHE}"
if ! "$VENV/bin/python" -m tooling.rehearsal changed; then
  leave_out+=(gpu_stack_install)
fi
if ((${#leave_out[@]})); then
  expr="not ${leave_out[0]}"
  for marker in "${leave_out[@]:1}"; do expr+=" and not $marker"; done
  set -- -m "$expr" "$@"
fi
"$VENV/bin/python" -m pytest -ra "${workers[@]}" "$@"
