"""The log-check table: every example line matches, K12/K17 are covered, bad tables are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance.errors import ApplianceError
from appliance.health.facts import Extractor
from appliance.health.table import LogTable, default_table_path, load_table

TABLE = load_table()
PATTERNS = [*TABLE.facts, *TABLE.fatal]


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_every_pattern_has_an_example_that_matches_and_holds_an_anchor(pattern):
    assert pattern.examples, f"{pattern.id} needs at least one real example line"
    for line in pattern.examples:
        assert pattern.compiled.search(line), line
        assert any(a in line for a in pattern.anchors), line


@pytest.mark.parametrize("pattern", TABLE.facts, ids=lambda p: p.id)
def test_every_fact_example_yields_its_facts_or_starts_a_run(pattern):
    assert pattern.examples, f"{pattern.id} has no example line to feed"
    for line in pattern.examples:
        extractor = Extractor(TABLE)
        extractor.feed_text(line + "\n")
        assert set(pattern.produces()) & set(extractor.facts.values) or pattern.reset, line
        assert extractor.facts.runs == (1 if pattern.reset else 0)


@pytest.mark.parametrize("pattern", TABLE.fatal, ids=lambda p: p.id)
def test_every_fatal_example_is_a_fatal_hit(pattern):
    assert pattern.examples, f"{pattern.id} has no example line to feed"
    for line in pattern.examples:
        extractor = Extractor(TABLE)
        extractor.feed_text(line + "\n")
        assert pattern.id in extractor.facts.fatal, line


def test_the_table_covers_every_k12_line_and_k17_signature_of_the_knowledge_file():
    facts = TABLE.fact_names()
    for name in ("guard_active", "guard_total", "runner_v2", "runner_fallback_reason", "sm120_decode",
                 "attention_backend", "kv_memory_gib", "kv_tokens", "kv_max_concurrency", "model_load_gib",
                 "model_load_seconds", "graph_capture_seconds", "cudagraph_mode_fallback", "nccl_version",
                 "nccl_lib_version", "spec_acceptance_rate", "spec_mean_acceptance_length", "startup_complete"):
        assert name in facts
    fatal = {p.id for p in TABLE.fatal}
    assert {"flashinfer-num-tokens-gate", "illegal-memory-access", "flashinfer-module-missing", "nccl-error",
            "nccl-timeout", "engine-dead", "out-of-memory"} <= fatal
    assert all(p.rule == "K17" for p in TABLE.fatal)


def test_every_expectation_names_a_rule_the_rulebook_defines():
    from appliance.rulebook import build

    assert TABLE.expectations
    defined = {entry.id for entry in build()}
    assert {e.rule for e in TABLE.expectations} <= defined


def _write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(default_table_path().read_text())
    mutate(data)
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["expectations"][0].update(present=["guard_activ"]), "unknown fact 'guard_activ'"),
    (lambda d: d["expectations"][0].update(when=["prefix_cachin"]), "unknown predicate 'prefix_cachin'"),
    (lambda d: d["expectations"][0].update(checks=["guard_active ~ 1"]), "is not `A op B`"),
    (lambda d: d["expectations"][0].update(checks=["guard_active <= profile.limits.max_len"]),
     "unknown profile field 'limits.max_len'"),
    (lambda d: d["expectations"][0].update(report="{profle.limits.max_model_len}"),
     "unknown fact 'profle.limits.max_model_len'"),
    (lambda d: d["expectations"][0].update(report="{profile.limits.max_len}"),
     "unknown profile field 'limits.max_len'"),
    (lambda d: d["facts"][0].update(regex="(unclosed"), "does not compile"),
    (lambda d: d["facts"][0].update(anchor="x"), "Extra inputs are not permitted"),
    (lambda d: d["facts"][3].update(types={"nope": "int"}), "types name no group"),
    (lambda d: d["fatal"].append(dict(d["fatal"][0])), "duplicate ids"),
], ids=["fact", "predicate", "check", "profile-field", "report-placeholder", "report-profile-field", "regex",
        "unknown-key", "types", "duplicate"])
def test_a_broken_table_is_refused_with_the_reason(tmp_path, mutate, message):
    path = _write(tmp_path, mutate)
    with pytest.raises(ApplianceError) as err:
        load_table(path)
    assert message in str(err.value)


def test_the_shipped_table_is_strict_yaml():
    assert isinstance(load_table(default_table_path()), LogTable)


@pytest.mark.parametrize(("loader", "what"), [
    ("appliance.health.table:load_table", "log-check table"),
    ("appliance.hostmem.sources:load_kernel_checks", "kernel-check table"),
    ("appliance.canary.golden:load_golden", "golden-probe table"),
    ("appliance.catalogue:load_catalogue", "hardware catalogue"),
])
def test_every_shipped_data_table_refuses_a_bad_entry_by_name_not_a_traceback(tmp_path, loader: str, what: str):
    import importlib

    module, name = loader.split(":")
    load = getattr(importlib.import_module(module), name)
    bad = tmp_path / "bad.yaml"
    bad.write_text("unexpected_key: 1\n")
    with pytest.raises(ApplianceError) as err:
        load(bad)
    assert f"invalid {what}" in err.value.message and "unexpected_key" in err.value.message
    assert err.value.fix and err.value.value == str(bad)


# --- who prints each line (printed_by) ------------------------------------------------------------

def _table_without(fact_id: str, edit) -> dict:
    data = yaml.safe_load(default_table_path().read_text())
    entry = next(f for f in data["facts"] if f["id"] == fact_id)
    edit(entry)
    return data


def test_every_fact_an_expectation_or_readiness_needs_says_which_process_and_rank_print_it():
    needed = {n for e in TABLE.expectations for n in e.required()} | {n for r in TABLE.readiness for n in r.present}
    by_fact = TABLE.printed_by()
    assert needed and all(by_fact[n] and None not in by_fact[n] for n in needed)
    nccl = next(p for p in TABLE.facts if p.id == "nccl-vllm").printed_by
    assert nccl is not None and (nccl.process, nccl.ranks) == ("worker", "rank0")
    assert "if self.rank == 0" in nccl.source and "pynccl.py:113" in nccl.source
    banner = next(p for p in TABLE.facts if p.id == "nccl-library").printed_by
    assert banner is not None and (banner.process, banner.ranks) == ("nccl", "all")


def test_a_needed_fact_without_printed_by_is_refused_at_load():
    data = _table_without("kv-tokens", lambda e: e.pop("printed_by"))
    with pytest.raises(ValueError, match="fact 'kv_tokens' has a pattern without printed_by"):
        LogTable.model_validate(data)


def test_asking_a_worker_for_a_line_only_the_head_prints_is_refused_at_load():
    data = yaml.safe_load(default_table_path().read_text())
    kv = next(e for e in data["expectations"] if e["id"] == "kv-holds-max-model-len")
    kv["roles"] = ["head", "single", "worker"]
    with pytest.raises(ValueError, match="asks a worker for 'kv_tokens', which only the head's engine_core prints"):
        LogTable.model_validate(data)


def test_printed_by_takes_only_the_known_processes_and_rank_sets():
    data = _table_without("nccl-vllm", lambda e: e["printed_by"].update(ranks="some"))
    with pytest.raises(ValueError, match="ranks"):
        LogTable.model_validate(data)
