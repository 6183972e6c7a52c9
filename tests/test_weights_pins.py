"""W1, W2: every checkpoint is pinned to a hub commit with the pin's source; a profile's override warns naming the
locked pin; config, render and fetch-model all use the one resolved revision."""

from __future__ import annotations

import json
import re

import pytest

from appliance.catalogue import load_catalogue
from appliance.cli import main
from appliance.lock import load_lock
from appliance.profile import list_profiles, load_profile
from appliance.weights.pins import revision_for


def test_every_catalogue_checkpoint_is_pinned_to_a_commit_with_its_source() -> None:
    pins = load_lock().checkpoints
    assert load_catalogue().checkpoints, "the catalogue holds no checkpoint"
    for checkpoint in load_catalogue().checkpoints:
        pin = pins[checkpoint]
        assert pin.revision and re.fullmatch(r"[0-9a-f]{40}", pin.revision), checkpoint
        assert len(pin.confirmed) > 30, f"{checkpoint}: say where the pin comes from"


def test_the_0731_pin_is_the_commit_the_community_launchers_use() -> None:
    assert load_lock().checkpoints["deepseek-ai/DeepSeek-V4-Flash-0731"].revision == \
        "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"


@pytest.mark.parametrize("name", list_profiles())
def test_every_shipped_profile_serves_a_pinned_revision(name: str) -> None:
    m = load_profile(name).profile.model
    assert revision_for(m.checkpoint, m.revision) == load_lock().checkpoints[m.checkpoint].revision


def test_config_shows_the_lock_pin_and_its_origin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "gb10-tp2", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["values"]["model.revision"]
    assert row == {"value": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb", "origin": "lock:versions.json"}


def test_an_override_is_rendered_and_validate_warns_naming_the_validated_pin(capsys: pytest.CaptureFixture[str]
                                                                             ) -> None:
    other = "0123456789abcdef" * 2 + "01234567"
    assert main(["validate", "gb10-tp2", "--set", f"model.revision={other}"]) == 0  # a warning, not an error
    out = capsys.readouterr()
    said = out.out + out.err
    assert "W1" in said and "9e165c30e2704aec5d9d593cce3eebd58bbef1cb" in said
    assert main(["render", "gb10-tp2", "--master-addr", "10.1.0.1", "--set", f"model.revision={other}", "--format",
                 "json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--revision") + 1] == other
