#!/usr/bin/env bash
# Install the real vLLM CPU engine and the smoke model's source into a venv (idempotent).
#
#   scripts/install-engine.sh            # venv at ${APPLIANCE_VENV:-$REPO/.venv}
#   APPLIANCE_INSTALL_FORCE=1 scripts/install-engine.sh   # redo the heavy steps
#   APPLIANCE_CHANNEL=NAME APPLIANCE_VENV=DIR APPLIANCE_INSTALL_TOOLS=0 scripts/install-engine.sh
#                                        # another CPU channel, engine only (the channel rehearsal's install)
#
# Versions come ONLY from versions.json (the CPU channel: $APPLIANCE_CHANNEL, else default_cpu_channel, and
# its `tools`); nothing is pinned here. The engine's steps are the package's (appliance/container/cpu_install.py, run
# by path: nothing needs to be installed first; `appliance engine install` runs the same from a wheel): a marker in the
# venv records what was installed, so a second run with the same versions only re-runs the cheap editable install.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${APPLIANCE_VENV:-$REPO/.venv}"
TOOLS="${APPLIANCE_INSTALL_TOOLS:-1}"
T_ALL=$(date +%s)
step_start() { T_STEP=$(date +%s); echo "==> $*"; }
step_end() { echo "    done in $(( $(date +%s) - T_STEP ))s"; }

ARGS=(--venv "$VENV" --versions "$REPO/versions.json")
if [[ -n "${APPLIANCE_CHANNEL:-}" ]]; then ARGS+=(--channel "$APPLIANCE_CHANNEL"); fi
if [[ -n "${APPLIANCE_PYTHON:-}" ]]; then ARGS+=(--python "$APPLIANCE_PYTHON"); fi
if [[ "$TOOLS" == "1" ]]; then ARGS+=(--tools); fi
if [[ "${APPLIANCE_INSTALL_FORCE:-0}" == "1" ]]; then ARGS+=(--force); fi
python3 "$REPO/appliance/container/cpu_install.py" "${ARGS[@]}"

if [[ "$TOOLS" != "1" ]]; then  # an engine-only venv (the channel rehearsal): the appliance comes by PYTHONPATH
  echo "==> total $(( $(date +%s) - T_ALL ))s (engine only)"
  exit 0
fi
# The editable install is redone only when pyproject.toml changed (its deps may have).
PKG_MARKER="$VENV/.appliance-pyproject-sha256"
PKG_WANT="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1) $REPO"
if [[ "${APPLIANCE_INSTALL_FORCE:-0}" != "1" && -f "$PKG_MARKER" && "$(cat "$PKG_MARKER")" == "$PKG_WANT" ]]; then
  echo "==> appliance already installed editable (pyproject.toml unchanged)"
else
  step_start "install the appliance (editable, [test])"
  TORCH_V="$(python3 "$REPO/appliance/container/lockcli.py" --versions "$REPO/versions.json" --target cpu version torch)"
  "$VENV/bin/python" -m pip install -q -e "$REPO[test]" "torch==$TORCH_V"
  printf '%s' "$PKG_WANT" >"$PKG_MARKER"
  step_end
fi

echo "==> total $(( $(date +%s) - T_ALL ))s; activate with: source $VENV/bin/activate"
