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
# Bytecode is cached (Python's default, beside each source; .gitignore keeps it out of git): the suite starts hundreds
# of Python processes (CLI calls, xdist workers, a serve's programs), and with PYTHONDONTWRITEBYTECODE set each one
# compiles the appliance's modules again and each worker rewrites every test module's asserts again (measured: a
# worker's collection 33 s of CPU without the cache, 20 s with it).
unset PYTHONDONTWRITEBYTECODE
# Two pytest-xdist workers, a test file per work unit, the slow files first (tests/scheduling.py says why and how);
# APPLIANCE_TEST_WORKERS=0 runs in one process.
workers=(-n "${APPLIANCE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
# A passed test's tmp_path is removed when it ends (a failed one's stays, for a look): pytest keeps three runs'
# folders under /tmp/pytest-of-$USER by default, ~3 GB each here, and a run that left them kept the next one's clean
# clone under the free-disk check below.
keep=(-o tmp_path_retention_policy=failed)

if [[ "${1:-}" == "--quick" ]]; then
  # Needs only `pip install -e '.[test]'` in $VENV: installs nothing, starts nothing. The `engine` and `tools` markers
  # are derived from the fixtures a test uses (tests/conftest.py), so leaving them out leaves out every test that
  # needs vLLM or a Debian tool; those tools are hidden from PATH for the run (tests/debian_tools.py), so that it
  # runs here as on a fresh clone.
  shift
  "$VENV/bin/ruff" check appliance tests benchmarks tooling
  quick=(-m "not engine and not tools and not docker and not rehearsal and not gpu_stack_install")
  APPLIANCE_TEST_WITHOUT_TOOLS=1 exec "$VENV/bin/python" -m pytest -ra "${workers[@]}" "${keep[@]}" "${quick[@]}" "$@"
fi

# Free disk, checked first: the offline bundle test writes ~9 GB (the bundle, docker save's scratch, what apply
# unpacks), a channel whose lock digest changed reinstalls a ~5.5 GB CUDA venv. A run that starts short fails here in
# seconds, naming what to clear, instead of 45 minutes in on ENOSPC. The suite needs 11 GB once $VENV is installed,
# and ~4 GB more where this run installs it first (a fresh clone): `scripts/demo.sh` before this installs it, and
# the same run then needs no more room than CI's (CI passed with 13 GB left after its install).
need_gb="${APPLIANCE_TEST_MIN_FREE_GB:-$([[ -x "$VENV/bin/vllm" ]] && echo 11 || echo 15)}"
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
# The Debian tools the tests run (chromium, promtool and prometheus, rsync, ip, unshare, shellcheck): tests/debian_tools.py
# names each with its package and the tests that need it.
packages=$("$VENV/bin/python" -m tests.debian_tools missing)
read -ra missing <<<"$packages"
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
"$VENV/bin/python" -m pytest -ra "${workers[@]}" "${keep[@]}" "$@"
