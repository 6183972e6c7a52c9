"""Profiles: strict YAML, `extends`, overrides with origins, re-validation after overrides."""

from __future__ import annotations

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
    assert any(load_profile(n).profile.provenance.status == "validated" for n in list_profiles()), \
        "no validated profile: the claim is not exercised"
    for name in list_profiles():
        prov = load_profile(name).profile.provenance
        assert prov.source
        if prov.status == "validated":
            assert "seed" in prov.source and prov.date is not None and prov.measured is not None, name
