"""Issue 22 item 3: one redaction (appliance/redact.py), every form a secret takes, on every output path.

A table of forms (each must be masked, the text around it kept), the order mask-then-cut/escape (a secret straddling
a 60-character cut or escaped by repr() must not leak in part), and the output paths that echo outside text: the
/metrics label, logscan's facts in text and JSON, a calibration file, an error message, argparse's own refusal."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.bounds import show
from appliance.cli import main
from appliance.redact import MASK, clip, redact

S = "SxS3cr3tV4lue"
NOENV: dict[str, str] = {}


FORMS = [  # (text carrying S, what it must become)
    (f"--api-key {S}", "--api-key ***"),
    (f'--api-key "{S} two"', '--api-key "***"'),
    (f"--api-key '{S}'", "--api-key '***'"),
    (f"--api-key={S}", "--api-key=***"),
    (f"--api-keys {S}", "--api-keys ***"),
    (f"--hf-token {S}", "--hf-token ***"),
    (f"['vllm', 'serve', '--api-key', '{S}', '--port', '8000']", "['vllm', 'serve', '--api-key', '***', '--port', "
                                                                  "'8000']"),
    (f'["--api-key", "{S}"]', '["--api-key", "***"]'),
    (f"\"api_key\": ['{S}']", "\"api_key\": ['***']"),
    (f"non-default args: {{'model_tag': 'm', 'api_key': ['{S}', 'Sx2nd'], 'port': 8011}}",
     "non-default args: {'model_tag': 'm', 'api_key': ['***', '***'], 'port': 8011}"),
    (f"Authorization: Bearer {S}", "Authorization: Bearer ***"),
    (f"Authorization: Basic {S}", "Authorization: Basic ***"),
    (f"Authorization:{S}", "Authorization:***"),
    (f"headers={{'authorization': '{S}'}}", "headers={'authorization': '***'}"),
    (f"Bearer {S}", "Bearer ***"),
    (f"https://user:{S}@host/x", "https://user:***@host/x"),
    (f"https://user:{S}@with@at@host", "https://user:***@host"),
    (f"tokens={S}&next=1", "tokens=***&next=1"),
    (f"token={S}", "token=***"),
    (f"HF_TOKEN={S} rest", "HF_TOKEN=*** rest"),
    (f'{{"password": "{S}"}}', '{"password": "***"}'),
    (f"x-api-key: {S}", "x-api-key: ***"),
    ("hf_AbCdEfGhIjKlMnOpQrStUv", MASK),
]
LEFT_ALONE = ["max_num_batched_tokens=8192", "--max-num-batched-tokens 8192", "'num_speculative_tokens': 5",
              '"completion_tokens": 12', '"tokens": [1, 2, 3]', "Maximum concurrency for 2048 tokens per request",
              "Basic usage: vllm serve"]


@pytest.mark.parametrize("text,masked", FORMS)
def test_every_secret_form_is_masked_and_the_text_around_it_kept(text: str, masked: str) -> None:
    assert redact(text, NOENV) == masked


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_engine_text_that_only_looks_like_a_key_is_left_alone(text: str) -> None:
    assert redact(text, NOENV) == text


@pytest.mark.parametrize("secret", ["plain-secret-4242", 'quo"te\\slash-42', "zero\u200bwidth-42", "tab\tin-42"])
def test_an_env_secret_is_masked_also_in_its_escaped_forms(secret: str) -> None:
    env = {"VLLM_API_KEY": secret}
    for escaped in (secret, repr(secret), json.dumps(secret), secret.encode("unicode_escape").decode()):
        out = redact(f"said {escaped} then", env)
        assert secret not in out and escaped.strip("'\"") not in out, out


def test_masking_comes_before_the_cut_so_a_straddling_secret_does_not_leak_in_part(monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    monkeypatch.setenv("VLLM_API_KEY", S)
    value = "x" * 55 + S  # the 60-character cut falls inside the secret
    for shown in (show(value), clip(value, 60), show(f"{'y' * 50} --api-key {S}tail")):
        assert not any(S[:n] in shown for n in range(4, len(S) + 1)), shown


def test_escaping_comes_after_masking(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "back\\slash'quote-99"
    monkeypatch.setenv("HF_TOKEN", secret)
    assert "slash" not in show(f"value {secret}") and "slash" not in clip(f"value {secret}")
    assert clip("a\x1b[2J\u202eb") == "a\\x1b[2J\\u202eb"  # no raw escape or bidi override reaches a terminal


# --- output paths ---------------------------------------------------------------------------------------------------

LOG = [  # each line puts S into a free-text fact (vllm_version, guard_managers, runner_fallback_reason)
    f"INFO 11-29 16:40:30 [api_server.py:1805] vLLM API server version 0.32.0,--api-key={S}",
    f"(EngineCore pid=1) INFO 11-29 16:40:38 [core.py:133] Initializing a V1 LLM engine (v0.32.0 --api-key {S}) "
    "with config: model='m'",
    f"INFO 08-09 10:02:11 [kv_cache_coordinator.py:212] Same-step ghost-block guard: 2/5 managers active "
    f"(SlidingWindowMLAManager token={S})",
    f"WARNING 08-01 10:00:00 [vllm.py:731] Model Runner V2 does not yet support Authorization: Basic {S}; using the "
    "V1 model runner instead.",
]


@pytest.fixture
def hostile_log(tmp_path: Path) -> Path:
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(LOG) + "\n")
    return log


@pytest.mark.parametrize("as_json", [False, True])
def test_logscan_masks_free_text_facts_in_text_and_json(hostile_log: Path, as_json: bool,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    main(["logscan", str(hostile_log), "--profile", "cpu-smoke", *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    assert S not in out and MASK in out
    if as_json:
        facts = json.loads(out)["logs"][0]["facts"]
        assert {"vllm_version", "guard_managers", "runner_fallback_reason"} <= set(facts)


@pytest.fixture
def exporter(hostile_log: Path) -> Iterator[str]:
    from appliance.health.exporter import ExporterConfig, build_exporter
    from appliance.profile.loader import load_profile

    exp = build_exporter(ExporterConfig(load_profile("cpu-smoke"), hostile_log, "single", interval=0.1,
                                        stale_after=30, live_grace=3600))
    stop = threading.Event()
    thread = threading.Thread(target=exp.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        yield exp.url
    finally:
        stop.set()
        thread.join(10)


def test_the_metrics_version_label_and_status_carry_no_secret_from_the_log(exporter: str) -> None:
    import time

    deadline = time.monotonic() + 10
    while "vllm_version" not in httpx.get(f"{exporter}/status", timeout=5).json()["facts"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    metrics = httpx.get(f"{exporter}/metrics", timeout=5).text
    status = httpx.get(f"{exporter}/status", timeout=5).text
    line = next(x for x in metrics.splitlines() if x.startswith("appliance_versions_info"))
    assert S not in metrics and S not in status and 'vllm="0.32.0' in line and MASK in line


def test_a_calibration_file_stores_replies_masked_and_a_round_compares_like_with_like(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch
                                                                                     ) -> None:
    from appliance.canary.calibration import load_calibration, new_calibration, save_calibration

    monkeypatch.setenv("VLLM_API_KEY", S)
    reply = f"the header was Authorization: Bearer {S} and the key {S}"
    path = tmp_path / "cal.json"
    save_calibration(new_calibration("m", f"http://127.0.0.1:1/?token={S}", ["a"], {"long:chat": reply}), path)
    text = path.read_text()
    assert S not in text and MASK in text
    assert load_calibration(path).greedy["long:chat"] == redact(reply)  # what checks.golden_compare compares with


def test_an_error_message_masks_before_it_truncates(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", S)
    assert main(["validate", "cpu-smoke", "--set", f"description={'d' * 55}{S}\x1b"]) == 2
    err = capsys.readouterr().err
    assert "control character" in err and not any(S[:n] in err for n in range(4, len(S) + 1)), err


def test_argparse_refusals_pass_the_redaction(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", S)
    with pytest.raises(SystemExit):
        main(["render", "cpu-smoke", "--node-rank", f"{S}\x1b[2J"])
    err = capsys.readouterr().err
    assert S not in err and "\x1b" not in err and "--node-rank" in err
