"""Where the APPLIANCE_* settings come from: pydantic-settings reads them when the environment holds one, and a
command run with none does not import it (issue 38, P10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from appliance.errors import ApplianceError
from appliance.settings import ApplianceSettings, load_settings

PROBE = """
import json, sys
from appliance.cli import main
code = main(["render", "cpu-smoke", "--json"])
print(json.dumps({"code": code, "settings_lib": "pydantic_settings" in sys.modules}))
"""


def _bare_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("APPLIANCE_")}
    return env | extra


def _probe(env: dict[str, str]) -> tuple[dict[str, object], str]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env,
                          check=True)
    *out, last = done.stdout.splitlines()
    return json.loads(last), "\n".join(out)


def test_a_command_with_no_appliance_variable_does_not_import_pydantic_settings() -> None:
    facts, _ = _probe(_bare_env())
    assert facts == {"code": 0, "settings_lib": False}


@pytest.mark.parametrize("name", ["APPLIANCE_SET", "appliance_set"])
def test_an_appliance_variable_is_read_through_pydantic_settings(name: str) -> None:
    facts, out = _probe(_bare_env(**{name: "limits.max_model_len=1536"}))
    assert facts == {"code": 0, "settings_lib": True}
    assert "1536" in out  # the override reached the rendered serve


def test_the_defaults_are_the_same_read_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.upper().startswith("APPLIANCE_")]:
        monkeypatch.delenv(name)
    bare = load_settings()
    assert type(bare) is ApplianceSettings and bare.model_fields_set == set()
    monkeypatch.setenv("APPLIANCE_NODE_RANK", "0")  # the default, given: now read from the environment
    read = load_settings()
    assert type(read) is not ApplianceSettings and read.model_fields_set == {"node_rank"}
    assert read.model_dump() == bare.model_dump()


def test_a_bad_variable_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_NODE_RANK", "99")
    with pytest.raises(ApplianceError, match="APPLIANCE_NODE_RANK='99'"):
        load_settings()
