"""Each engine flag is declared once (render/flags.py): its owner is a profile field, its words are what the plan
renders, and the managed-flag list a passthrough is refused against is derived from the same declarations."""

from __future__ import annotations

from pydantic import BaseModel

from appliance.profile.loader import load_profile
from appliance.profile.model import Profile
from appliance.render import managed
from appliance.render.flags import ENGINE_FLAGS, owners
from appliance.render.plan import build_plan, plan_facts


def _is_field(path: str) -> bool:
    model: type[BaseModel] | None = Profile
    for part in path.split("."):
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        model = next((a for a in getattr(annotation, "__args__", (annotation,))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return True


def test_every_flag_the_serve_renders_is_owned_by_a_profile_field_that_exists() -> None:
    rendered = [e for e in ENGINE_FLAGS if e.words]
    assert len(rendered) >= 25
    missing = [(e.flags, key) for e in rendered for key in e.owner.split(" and ") if not _is_field(key)]
    assert missing == []
    assert not _is_field("engine.no_such_switch") and not _is_field("server.port.deeper")


def test_the_managed_flag_list_is_derived_from_the_declarations_and_names_each_spelling_once() -> None:
    assert owners() == managed.FLAG_OWNERS
    spellings = [f for e in ENGINE_FLAGS for f in e.flags]
    assert len(spellings) == len(set(spellings)) == len(managed.FLAG_OWNERS)
    assert managed.FLAG_OWNERS["--no-enable-prefix-caching"] == "cache.prefix_caching"
    assert managed.FLAG_OWNERS["--enable-auto-tool-choice"] == "server.tool_call_parser"


def test_a_declaration_s_words_are_exactly_what_the_plan_renders_for_it() -> None:
    profile = load_profile("rtx-pro-6000-tp2").profile
    facts = plan_facts(profile)
    argv = build_plan(profile, facts=facts).argv
    chosen = [e for e in ENGINE_FLAGS if e.flags[0] in ("--max-model-len", "--speculative-config")]
    assert len(chosen) == 2
    for entry in chosen:
        words = entry.words(profile, None, facts, profile.server.port) if entry.words else []
        assert words and argv[argv.index(words[0]):argv.index(words[0]) + len(words)] == words
    port = next(e for e in ENGINE_FLAGS if e.flags == ("--port",))
    assert port.words is not None and port.words(profile, None, facts, 8000) == []  # the engine's default port
    assert port.words(profile, None, facts, 8123) == ["--port", "8123"]
