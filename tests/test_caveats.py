"""Quiet defaults (issue 37 item 2): no shipped profile prints a warning that a shipped default causes on every
command. What a profile knowingly accepts is a caveat with its reason, said in full by `profiles show` and `config`
and counted in one line by validate, render and run; a warning it does not accept is printed as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from appliance.profile import list_profiles, load_profile
from appliance.rules import context_for, evaluate
from appliance.rules.caveats import caveat_key, to_show
from tests.conftest import ROOT
from tests.in_process import CliRun, run_main

SHIPPED = [n for n in list_profiles() if load_profile(n).profile.provenance.status != "test"]


def cli(*args: str) -> CliRun:
    """`appliance ARGS` in-process (tests/in_process.py), without this session's APPLIANCE_ variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    return run_main(args, env={**env, "APPLIANCE_MASTER_ADDR": "192.0.2.1"}, replace_env=True, cwd=ROOT, limit_s=120)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_profile_prints_no_warning_it_has_not_accepted_with_a_reason(name: str) -> None:
    p = load_profile(name).profile
    shown, _ = to_show(evaluate(context_for(p)), p)
    assert [caveat_key(f) for f in shown] == [], f"{name}: accept these in its YAML (caveats) or fix them"


def test_every_caveat_a_profile_file_declares_fires_on_a_shipped_profile_that_carries_it() -> None:
    """A caveat whose warning no longer fires would hide the next warning of that rule on that field unseen."""
    fired = {n: {caveat_key(f) for f in evaluate(context_for(load_profile(n).profile))} for n in SHIPPED}
    files = sorted((ROOT / "profiles").rglob("*.yaml"))
    declared = {(f.relative_to(ROOT / "profiles").with_suffix("").as_posix(), key)
                for f in files for key in (yaml.safe_load(f.read_text()) or {}).get("caveats", {})}
    assert declared, "no profile declares a caveat"
    for source, key in declared:
        carriers = [n for n in SHIPPED if key in load_profile(n).profile.caveats
                    and (source == n or source in (yaml.safe_load((ROOT / "profiles" / f"{n}.yaml").read_text())
                                                   .get("extends") or []))]
        assert any(key in fired[n] for n in carriers), f"{source}: caveat {key!r} fires on none of {carriers}"


def test_the_flagship_is_quiet_on_validate_and_render_and_says_why_in_profiles_show() -> None:
    validate = cli("validate", "gb10-tp2")
    assert validate.returncode == 0 and "WARNING" not in validate.stdout + validate.stderr, validate.stdout
    assert "gb10-tp2: ok (0 error(s), 0 warning(s))" in validate.stdout
    assert "4 accepted caveat(s) (E7 engine.channel, K31 engine.flashinfer_autotune, K38 engine.runner, " \
           "P1 limits.max_model_len): `appliance profiles show gb10-tp2` says why" in validate.stdout
    render = cli("render", "gb10-tp2")
    assert render.returncode == 0 and "WARNING" not in render.stderr and "4 accepted caveat(s)" in render.stderr
    assert "autotune" not in render.stdout  # still the seed's command flag for flag
    show = cli("profiles", "show", "gb10-tp2")
    assert show.returncode == 0, show.stderr
    assert "accepted    K31 engine.flashinfer_autotune" in show.stdout
    assert "accepted because the seed's reference command sets no FlashInfer autotuning flag" in show.stdout
    findings = json.loads(cli("validate", "gb10-tp2", "--json").stdout)["findings"]
    assert {f["rule"] for f in findings if f["accepted"]} == {"E7", "K31", "K38", "P1"}  # --json keeps every finding


def test_a_warning_an_override_causes_is_printed_in_full_beside_the_accepted_ones() -> None:
    out = cli("validate", "gb10-tp2", "--set", "cache.guard=0")
    assert out.returncode == 0 and "WARNING K4 cache.guard=0" in out.stderr, out.stderr
    assert "(0 error(s), 1 warning(s))" in out.stdout and "4 accepted caveat(s)" in out.stdout


def test_a_caveat_that_names_no_rule_and_field_or_gives_no_reason_is_exit_2_naming_it(tmp_path: Path) -> None:
    base = yaml.safe_load((ROOT / "profiles" / "cpu-smoke.yaml").read_text())
    for caveats, said in (({"K38": "why"}, "is not `RULE field`"), ({"K38 engine.runner": " "}, "needs its reason")):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump({**base, "caveats": caveats}))
        out = cli("validate", str(path))
        assert out.returncode == 2 and said in out.stderr and "caveats" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


def test_k8s_says_the_warnings_validate_says_on_stderr_beside_clean_manifests() -> None:
    out = cli("k8s", "gb10-tp2", "--set", "cache.guard=0")
    assert out.returncode == 0, out.stderr
    assert "WARNING K4 cache.guard=0" in out.stderr and "4 accepted caveat(s)" in out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert docs and all(isinstance(d, dict) and "kind" in d for d in docs)  # stdout stays the manifests alone
