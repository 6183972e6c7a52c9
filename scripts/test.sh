#!/usr/bin/env bash
# The test suite on a fresh machine: install the CPU engine and test tools, start a private Docker
# engine for the container tests, run pytest, stop the engine by PID.
#
#   scripts/test.sh                 # everything (unit, real CPU engine, container)
#   scripts/test.sh -m "not docker" # pytest arguments pass through
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

scripts/install-engine.sh
# promtool (Debian's prometheus package) lints the exporter's /metrics (tests/test_health_metrics_lint.py).
if ! command -v promtool >/dev/null 2>&1; then
  sudo_=""; [[ $(id -u) == 0 ]] || sudo_=sudo
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends prometheus
fi
VENV="${APPLIANCE_VENV:-$REPO/.venv}"

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

"$VENV/bin/ruff" check appliance tests benchmarks
if [[ "${APPLIANCE_TEST_DOCKER:-1}" != "1" ]]; then
  set -- -m "not docker" "$@"  # no daemon started: the container tests are left out, and said so by pytest
fi
"$VENV/bin/python" -m pytest -ra "$@"
