#!/usr/bin/env bash
# The main job on a machine without SM12x GPUs: from nothing to a served model answering a
# request, through the whole appliance path (validate, doctor, render, supervisord, exporter).
#
#   scripts/demo.sh          # serve cpu-smoke on :8000 (health on :8470) until Ctrl-C
#   scripts/demo.sh --once   # answer one request, then stop
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
scripts/install-engine.sh
VENV="${APPLIANCE_VENV:-$REPO/.venv}"
export PATH="$VENV/bin:$PATH" HF_HUB_OFFLINE=1 APPLIANCE_PROFILE=cpu-smoke

model="$(appliance smoke-model)"
export APPLIANCE_MODEL_DIR="$model"
appliance validate cpu-smoke

appliance run & serve=$!
stop() { kill -TERM "$serve" 2>/dev/null || true; wait "$serve" 2>/dev/null || true; }
trap stop EXIT INT TERM

port=$(appliance config --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["values"]["server.port"]["value"])')
echo "waiting for the serve on :$port to be ready (the exporter's verdict, as Docker's healthcheck asks it) ..."
for _ in $(seq 1 180); do
  if healthchecks/probe ready >/dev/null 2>&1; then break; fi
  kill -0 "$serve" 2>/dev/null || { echo "the serve exited" >&2; exit 1; }
  sleep 2
done
python3 - "$port" <<'PY'
import json, sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions", method="POST",
    data=json.dumps({"model": "smollm2", "max_tokens": 32,
                     "messages": [{"role": "user", "content": "Name three colours."}]}).encode(),
    headers={"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]
print(f"\nsmollm2 answered: {answer!r}\n")
PY
if [[ "${1:-}" == "--once" ]]; then exit 0; fi
echo "serving on http://127.0.0.1:$port/v1 (health exporter :8470); Ctrl-C stops it"
wait "$serve"
