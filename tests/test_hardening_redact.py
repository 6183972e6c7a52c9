"""Issue 11, class 7: one redaction, used wherever text from outside is echoed — process command lines (doctor),
log lines (logscan, /status), receipts, error messages."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.doctor.host import running_engines
from appliance.redact import MASK, redact

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
KEY = "sk-local-8f2e1c0d9b7a"


@pytest.mark.parametrize("text,secret", [
    (f"vllm serve m --api-key {KEY} --port 8000", KEY),
    (f"vllm serve m --api-key={KEY}", KEY),
    (f"huggingface-cli login --hf-token {KEY}", KEY),
    (f"download token={KEY}&x=1", KEY),
    (f'{{"api_key": "{KEY}"}}', KEY),
    (f"Authorization: Bearer {KEY}", KEY),
    (f"HF_TOKEN={KEY} vllm serve", KEY),
    (f"cloned https://user:{KEY}@example.invalid/repo", KEY),
    (f"using {TOKEN} from the cache", TOKEN),
    (f"password: {KEY}", KEY),
])
def test_secret_forms_are_masked(text: str, secret: str) -> None:
    out = redact(text, env={})
    assert secret not in out and MASK in out


def test_the_values_of_the_secret_variables_are_masked_wherever_they_appear() -> None:
    env = {"HF_TOKEN": "plain-value-1", "VLLM_API_KEY": "plain-value-12"}
    out = redact("a plain-value-12 b plain-value-1 c", env=env)
    assert out == f"a {MASK} b {MASK} c"


@pytest.mark.parametrize("text", [
    "--max-num-batched-tokens 8192 --tokenizer-mode deepseek_v4",
    "max_num_batched_tokens=8192, num_speculative_tokens=5, dspark_noise_token_id=128799",
    "Same-step ghost-block guard: 5/5 managers active",
])
def test_ordinary_engine_text_is_left_alone(text: str) -> None:
    assert redact(text, env={}) == text


def test_doctor_shows_a_running_engine_without_its_api_key(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # A real process whose command line reads like an engine's: doctor must name it, never its secrets.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "vllm", "serve", "m",
                             "--api-key", KEY, "--hf-token", TOKEN])
    try:
        time.sleep(0.2)
        engines = dict(running_engines())
        main(["doctor", "cpu-smoke"])  # it names the first engine it finds (another may run on this host)
        out = capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()
    assert f"--api-key {MASK}" in engines[proc.pid] and f"--hf-token {MASK}" in engines[proc.pid]
    assert KEY not in str(engines) and TOKEN not in str(engines)
    assert "vLLM process(es) already running" in out and KEY not in out and TOKEN not in out


def test_logscan_prints_a_fatal_line_with_its_secrets_masked(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "env-secret-value")
    log = tmp_path / "vllm.log"
    log.write_text(f"ERROR EngineDeadError: request Authorization: Bearer {KEY} token={TOKEN} "
                   f"key env-secret-value\n")
    for argv in (["logscan", str(log), "--profile", "cpu-smoke"], ["logscan", str(log), "--profile", "cpu-smoke",
                                                                    "--json"]):
        assert main(argv) == 1
        out = capsys.readouterr().out
        assert "EngineDeadError" in out and MASK in out
        assert KEY not in out and TOKEN not in out and "env-secret-value" not in out


def test_an_error_message_never_echoes_a_secret_value(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "my-own-hf-token-value")
    assert main(["validate", "cpu-smoke", "--set", "server.host=my-own-hf-token-value!"]) == 2
    err = capsys.readouterr().err
    assert "my-own-hf-token-value" not in err and "server.host" in err


def test_a_receipt_is_written_with_secrets_masked(tmp_path: Path) -> None:
    from appliance.gate.receipt import build, write

    receipt = build({"schema": "appliance-gate-receipt/1", "complete": False, "verdict": "incomplete",
               "started_at": "x", "provenance": {}, "target": {"url": "http://127.0.0.1:8000"},
               "engagement": {"available": True, "fatal": [{"rule": "K17", "id": "x", "text": f"Bearer {KEY}"}]},
               "checks": [{"name": "bench", "status": "error", "summary": f"llama-benchy --api-key {KEY} failed",
                           "metrics": {}}]})
    path = write(receipt, tmp_path)
    text = path.read_text() + (tmp_path / "summary.md").read_text()
    assert KEY not in text and MASK in text
    assert json.loads(path.read_text())["checks"][0]["summary"] == f"llama-benchy --api-key {MASK} failed"
