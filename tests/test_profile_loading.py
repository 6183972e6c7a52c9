"""Profiles: strict YAML, `extends`, overrides with origins, re-validation after overrides."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.profile import list_profiles, load_profile
from appliance.yamlstrict import load_text


def test_duplicate_keys_are_refused_with_both_lines() -> None:
    with pytest.raises(ApplianceError, match=r"duplicate key 'port' \(first at line 2\)"):
        load_text("server:\n  port: 1\n  port: 2\n", "p.yaml")


@pytest.mark.parametrize("word", ["off", "yes", "No", "ON"])
def test_yaml11_booleans_are_refused(word: str) -> None:
    with pytest.raises(ApplianceError, match="ambiguous boolean"):
        load_text(f"cache:\n  prefix_caching: {word}\n")


def test_true_false_and_quoted_words_still_load() -> None:
    assert load_text("a: true\nb: False\nc: 'off'\n") == {"a": True, "b": False, "c": "off"}


def _pure_python_twin() -> type:
    """The strict loader's rules on PyYAML's pure-Python parser: what the loader was before it took libyaml's."""
    import yaml

    from appliance import yamlstrict

    strict = yamlstrict._StrictLoader
    return type("PureStrict", (yaml.SafeLoader,), {"source": "<yaml>", "yaml_constructors": strict.yaml_constructors,
                                                   "yaml_implicit_resolvers": strict.yaml_implicit_resolvers})


def test_libyaml_reads_every_shipped_yaml_as_the_pure_python_parser_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from appliance import yamlstrict

    assert yamlstrict._StrictLoader.__mro__[1] is yaml.CSafeLoader  # the wheels carry libyaml: else this is moot
    root = Path(__file__).parents[1]
    files = sorted(f for d in ("profiles", "appliance", "channels", "compose", "deploy") if (root / d).is_dir()
                   for f in (root / d).rglob("*.y*ml"))
    assert len(files) > 20
    fast = {f: yamlstrict.load_file(f) for f in files}
    monkeypatch.setattr(yamlstrict, "_StrictLoader", _pure_python_twin())
    assert {f: yamlstrict.load_file(f) for f in files} == fast


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "a: yes\n", "a: 010\n", "a: 1_000\n", "a: [1,\n",
                                  "a: !!python/none x\n", "a: &x [*x]\n", "x: " + "[" * 5000 + "]" * 5000 + "\n"])
def test_libyaml_and_the_pure_python_parser_refuse_the_same_documents(monkeypatch: pytest.MonkeyPatch,
                                                                       text: str) -> None:
    from appliance import yamlstrict

    with pytest.raises(ApplianceError) as fast:
        load_text(text, "p.yaml")
    monkeypatch.setattr(yamlstrict, "_StrictLoader", _pure_python_twin())
    with pytest.raises(ApplianceError) as pure:
        load_text(text, "p.yaml")
    assert fast.value.fix == pure.value.fix  # the same class of refusal (the parser's own words may differ)


def test_extends_merges_bases_in_order_and_records_each_origin() -> None:
    loaded = load_profile("gb10-tp2")
    p = loaded.profile
    assert (p.hardware.gpu, p.hardware.nodes, p.parallel.tensor) == ("gb10", 2, 2)
    assert p.cache.kv_dtype == "fp8"
    assert loaded.origin("hardware.nodes") == "base:bases/gb10"
    assert loaded.origin("cache.kv_dtype") == "base:bases/deepseek-v4-flash"
    assert loaded.origin("provenance.status") == "profile:gb10-tp2"
    assert loaded.origin("model.revision") == "default"


def test_cli_override_wins_over_env_override_and_both_are_revalidated() -> None:
    loaded = load_profile("gb10-tp2", env_overrides=["cache.guard=1", "limits.max_num_seqs=8"],
                          cli_overrides=["cache.guard=0"])
    assert loaded.profile.cache.guard == 0
    assert loaded.origin("cache.guard") == "cli:--set"
    assert loaded.profile.limits.max_num_seqs == 8
    assert loaded.origin("limits.max_num_seqs") == "env:APPLIANCE_SET"
    with pytest.raises(ApplianceError, match=r"cache.guard=3 \(cli:--set\)"):
        load_profile("gb10-tp2", cli_overrides=["cache.guard=3"])


def test_override_to_null_turns_a_section_off() -> None:
    assert load_profile("gb10-tp2", cli_overrides=["speculative="]).profile.speculative is None


def test_unknown_key_is_refused_with_a_did_you_mean() -> None:
    with pytest.raises(ApplianceError) as err:
        load_profile("gb10-tp2", cli_overrides=["cache.gaurd=0"])
    assert "cache.gaurd: unknown key" in str(err.value)
    assert "did you mean 'guard'" in str(err.value)


def test_unknown_profile_names_the_close_ones() -> None:
    with pytest.raises(ApplianceError, match="did you mean gb10-tp2"):
        load_profile("gb10-tp")


def test_malformed_override_names_the_expected_form() -> None:
    with pytest.raises(ApplianceError, match=r"a\.b=value"):
        load_profile("gb10-tp2", cli_overrides=["cache.guard"])


def test_a_profile_file_outside_the_catalogue_can_extend_bases(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("extends: [bases/deepseek-v4-flash, bases/rtx-pro-6000, bases/ckpt-0731]\n"
                    "provenance: {status: unvalidated, source: me}\n")
    # A path outside profiles/ resolves its bases in profiles/bases.
    assert load_profile(str(path)).profile.hardware.gpu == "rtx-pro-6000"


def test_extends_cycle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bases").mkdir()
    (tmp_path / "bases" / "a.yaml").write_text("extends: [bases/b]\n")
    (tmp_path / "bases" / "b.yaml").write_text("extends: [bases/a]\n")
    (tmp_path / "p.yaml").write_text("extends: [bases/a]\n")
    with pytest.raises(ApplianceError, match="extends itself"):
        load_profile("p", root=tmp_path)


def test_catalogue_ships_at_least_eleven_deepseek_profiles_and_the_named_ones() -> None:
    names = list_profiles()
    deepseek = [n for n in names if "DeepSeek" in load_profile(n).profile.model.checkpoint]
    assert len(deepseek) >= 11
    assert {"gb10-tp2", "rtx-pro-6000-tp2", "cpu-smoke"} <= set(names)


def test_every_profile_states_provenance_and_only_seed_runs_claim_validated() -> None:
    names = list_profiles()
    assert names
    statuses = set()
    for name in names:
        prov = load_profile(name).profile.provenance
        assert prov.source
        statuses.add(prov.status)
        if prov.status == "validated":
            assert "seed" in prov.source and prov.date is not None and prov.measured is not None, name
        if prov.status == "partial":  # the seed's runs that did not pass every check at the shipped shape
            assert "seed" in prov.source and prov.measured is not None and prov.blockers, name
    assert "partial" in statuses  # the seed's measured runs are claimed, each with its blockers


def test_profiles_json_shows_no_validated_profile_off_its_measured_shape_or_with_a_non_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The harness's definition: validated = every check PASSed at the shape the profile ships; partial names each
    # blocker.
    from appliance.cli import main
    from appliance.profile.model import validated_blockers

    assert main(["profiles", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if isinstance(r.get("provenance"), dict)]
    assert {r["name"] for r in rows} >= {"gb10-tp2", "rtx-pro-6000-tp2"}
    for r in rows:
        prov = r["provenance"]
        assert prov["status"] != "partial" or prov["blockers"], r["name"]
        measured = prov["measured"] or {}
        assert prov["status"] != "validated" or not (prov["blockers"] or measured.get("unverified")), r["name"]
        # and its shipped shape is the measured one (max_model_len, tensor size, runner, guard)
        assert prov["status"] != "validated" or validated_blockers(load_profile(r["name"]).profile) == [], r["name"]
    gb10 = next(r for r in rows if r["name"] == "gb10-tp2")
    assert gb10["provenance"]["status"] == "partial" and gb10["provenance"]["measured"]["max_model_len"] == 131072


def test_validated_is_refused_naming_each_blocker(tmp_path: Path) -> None:
    # gb10-tp2 with its blockers list removed and status validated: the measurement's own record still shows a
    # non-PASS check and another max_model_len, and the loader names both.
    shutil.copytree(Path(__file__).parents[1] / "profiles" / "bases", tmp_path / "bases")
    src = (Path(__file__).parents[1] / "profiles" / "gb10-tp2.yaml").read_text()
    start, end = src.index("  blockers:"), src.index("  measured:")
    (tmp_path / "p.yaml").write_text(src[:start].replace("status: partial", "status: validated") + src[end:])
    with pytest.raises(ApplianceError, match="validated needs every check") as e:
        load_profile("p", root=tmp_path)
    assert "tests/v1/spec_decode" in str(e.value)
    assert "measured at max_model_len 131072, ships 49152" in str(e.value)


def _gb10_measured_as_shipped() -> str:
    """gb10-tp2 as if its battery had PASSed every check at the shape it ships: no blockers, no unverified coverage,
    measured at 49152. Only this makes `validated` loadable."""
    src = (Path(__file__).parents[1] / "profiles" / "gb10-tp2.yaml").read_text()
    start, end = src.index("  blockers:"), src.index("  measured:")
    src = src[:start].replace("status: partial", "status: validated") + src[end:]
    dropped = ("unverified:", "tests/v1/spec_decode does not", "It remains unverified coverage")
    kept = [line for line in src.splitlines() if not any(d in line for d in dropped)]
    out = "\n".join(kept).replace("max_model_len: 131072", "max_model_len: 49152") + "\n"
    assert "status: validated" in out and "unverified" not in out and "max_model_len: 49152" in out
    return out


def _data_root(tmp_path: Path, profiles: dict[str, str]) -> Path:
    """A copy of the repository's data (lock, channels, health tables, profiles) with `profiles` added."""
    repo = Path(__file__).parents[1]
    for part in ("versions.json",):
        shutil.copy(repo / part, tmp_path / part)
    for part in ("channels", "healthchecks", "monitoring", "profiles"):
        if (repo / part).is_dir():
            shutil.copytree(repo / part, tmp_path / part)
    for name, text in profiles.items():
        (tmp_path / "profiles" / f"{name}.yaml").write_text(text)
    return tmp_path


def test_profiles_json_shows_a_validated_profile_only_at_its_measured_shape(tmp_path: Path) -> None:
    # The check the Done-when asks for, on a root that holds a validated profile (the shipped ones hold none): the
    # row says validated with no blocker, and its loaded profile's shape is the measured one.
    from appliance.profile.model import validated_blockers

    root = _data_root(tmp_path, {"zz-validated": _gb10_measured_as_shipped()})
    run = subprocess.run([sys.executable, "-m", "appliance", "profiles", "--json", "--all"], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "APPLIANCE_ROOT": str(root)}, check=False)
    assert run.returncode == 0, run.stderr
    rows = {r["name"]: r for r in json.loads(run.stdout) if isinstance(r.get("provenance"), dict)}
    validated = [n for n, r in rows.items() if r["provenance"]["status"] == "validated"]
    assert validated == ["zz-validated"]
    for name in validated:
        prov = rows[name]["provenance"]
        assert prov["blockers"] == [] and not prov["measured"]["unverified"]
        assert validated_blockers(load_profile(name, root=root / "profiles").profile) == []


@pytest.mark.parametrize(("edit", "named"), [
    (("max_model_len: 49152", "max_model_len: 131072"), "measured at max_model_len 131072, ships 49152"),
    (("tensor: 2", "tensor: 4"), "measured at tensor size 4, ships 2"),
    (("runner: v2", "runner: v1"), "measured with runner v1, ships v2"),
    (('  hardware: "GB10 SM121 x2"', '  hardware: "GB10 SM121 x2"\n  blockers: ["B2 TIMEOUT"]'), "B2 TIMEOUT"),
])
def test_validated_off_the_measured_shape_or_with_a_blocker_is_refused(tmp_path: Path, edit: tuple[str, str],
                                                                        named: str) -> None:
    # Each way a validated claim can outrun its measurement, on the one profile that otherwise loads as validated.
    text = _gb10_measured_as_shipped()
    assert text.count(edit[0]) == 1
    root = _data_root(tmp_path, {"zz-validated": text.replace(*edit)})
    with pytest.raises(ApplianceError, match="validated needs every check") as e:
        load_profile("zz-validated", root=root / "profiles")
    assert named in str(e.value)


def test_partial_without_blockers_is_refused(tmp_path: Path) -> None:
    shutil.copytree(Path(__file__).parents[1] / "profiles" / "bases", tmp_path / "bases")
    src = (Path(__file__).parents[1] / "profiles" / "gb10-tp2.yaml").read_text()
    start, end = src.index("  blockers:"), src.index("  measured:")
    (tmp_path / "p.yaml").write_text(src[:start] + src[end:])
    with pytest.raises(ApplianceError, match=r"partial needs provenance\.blockers"):
        load_profile("p", root=tmp_path)
