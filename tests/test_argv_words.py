"""Issue 22 item 4: a profile value never becomes an engine flag.

Every profile string that the renderer puts on the engine's command line is found here by rendering (a marker value
in each string field, looked for in the argv), not listed by hand, so a new field cannot slip past: each must be an
`ArgWord` (never empty, never dash-led). A dash-led value is refused naming the field; and the engine's own parser
(vLLM's, appliance/engine_args.py) parses exactly the profile's values from the rendered argv, hostile-but-legal
text included."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel

from appliance.cli import main
from appliance.placement import resolve_placement
from appliance.profile.loader import load_profile
from appliance.profile.model import Profile, _argv_word
from appliance.render import Placement, build_plan

MARKER = "markervalue7"
BASES = ["cpu-smoke", "gb10-tp2"]


def _is_argv_word(annotation: Any, metadata: tuple[Any, ...] = ()) -> bool:
    """The annotation (or pydantic's field metadata, where it moves an outer Annotated's) carries _argv_word."""
    if any(getattr(m, "func", None) is _argv_word for m in metadata):
        return True
    for arg in (annotation, *typing.get_args(annotation)):
        if any(getattr(m, "func", None) is _argv_word for m in getattr(arg, "__metadata__", ())):
            return True
        if typing.get_origin(arg) is typing.Annotated and _is_argv_word(typing.get_args(arg)[0]):
            return True
        if typing.get_origin(arg) in (list, typing.Union) and any(_is_argv_word(a) for a in typing.get_args(arg)):
            return True
    return False


def _text_fields(model: type[BaseModel], prefix: str = "") -> dict[str, tuple[Any, bool]]:
    """path -> (field info, is a list) of every str or list[str] field, sections recursed."""
    out: dict[str, tuple[Any, bool]] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        args = [info.annotation, *typing.get_args(info.annotation)]
        sub = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None:
            out |= _text_fields(sub, f"{path}.")
            continue
        flat = repr(info.annotation)
        if "str" in flat and "Literal" not in flat and "date" not in flat:
            out[path] = (info, "list[" in flat)
    return out


TEXT_FIELDS = _text_fields(Profile)


def _rendered(base: str, override: str) -> list[str] | None:
    try:
        profile = load_profile(base, cli_overrides=[override]).profile
    except Exception:
        return None  # the field does not take this value on this base (a pattern, a cross-field rule)
    return build_plan(profile, resolve_placement(profile, Placement(node_rank=0, master_addr="10.1.0.1"))).argv


PASSTHROUGH = {"engine.extra_args"}
"""Engine flags by design (issue 25): rules X1-X5 check each against the channel's facts and refuse the flags the
appliance manages, so they are no values that could turn into a flag (test_passthrough_cannot_take_a_managed_flag)."""


def argv_bound_fields() -> dict[str, bool]:
    """path -> is a list, for each text field whose value shows up in the rendered engine argv."""
    found: dict[str, bool] = {}
    for path, (_, is_list) in TEXT_FIELDS.items():
        if path == "name" or path in PASSTHROUGH:
            continue  # the profile's name is the file's; it is no override
        value = f"[{MARKER}]" if is_list else MARKER
        for base in BASES:
            argv = _rendered(base, f"{path}={value}")
            if argv and any(MARKER in word for word in argv):
                found[path] = is_list
                break
    return found


ARGV_BOUND = argv_bound_fields()


def test_the_search_finds_the_known_argv_words() -> None:
    # A floor, so the search cannot silently find nothing.
    # model.revision is no free text since issue 27 (a 40-hex commit, pattern-checked), so no marker reaches it.
    assert {"model.checkpoint", "server.served_model_name", "server.tokenizer_mode",
            "server.tool_call_parser", "server.reasoning_parser", "engine.logits_processors",
            "server.host"} <= set(ARGV_BOUND)


@pytest.mark.parametrize("path", sorted(ARGV_BOUND))
def test_every_profile_string_that_reaches_the_engine_argv_is_an_argv_word(path: str) -> None:
    info = TEXT_FIELDS[path][0]
    assert _is_argv_word(info.annotation, tuple(info.metadata)), f"{path} reaches the engine's argv but is no ArgWord"


@pytest.mark.parametrize("path", sorted(ARGV_BOUND))
@pytest.mark.parametrize("value", ["--trust-remote-code", "-x", " --enforce-eager", ""])
def test_a_dash_led_or_empty_value_is_refused_naming_the_field(path: str, value: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    item = f"[a, {value!r}]" if ARGV_BOUND[path] else repr(value)  # quoted: the value as text, not YAML
    assert main(["validate", "gb10-tp2", f"--set={path}={item}"]) == 2
    err = capsys.readouterr().err
    assert path.split(".")[-1] in err and ("'-'" in err or "empty" in err or "at least 1" in err), err


def test_passthrough_cannot_take_a_managed_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "gb10-tp2", "--set", "engine.extra_args=[--trust-remote-code]"]) == 2
    assert "X2" in capsys.readouterr().err


def test_logits_processors_cannot_smuggle_trust_remote_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "cpu-smoke", "--set", "engine.logits_processors=[a, --trust-remote-code]"]) == 2
    assert "engine.logits_processors.1" in capsys.readouterr().err


# --- the engine's own parser: what it parses is what the profile says -----------------------------------------------

HOSTILE_BUT_LEGAL = ["name with spaces", "a=--trust-remote-code", "x --enforce-eager", "ünïcode/名前", "'quoted'",
                     "semi;colon", "${HOME}", "$(id)"]
NAMESPACE = {  # profile path -> vLLM namespace key
    "model.checkpoint": "model", "model.revision": "revision", "server.served_model_name": "served_model_name",
    "server.tokenizer_mode": "tokenizer_mode", "server.tool_call_parser": "tool_call_parser",
    "server.reasoning_parser": "reasoning_parser", "engine.logits_processors": "logits_processors",
    "server.host": "host",
}


def _parsed_matches_profile(argv: list[str], profile: Profile) -> None:
    from appliance.engine_args import parse_serve_argv

    parsed = parse_serve_argv(argv)
    for path, key in NAMESPACE.items():
        section, field = path.split(".")
        want = getattr(getattr(profile, section), field)
        got = parsed.get(key)
        if key == "served_model_name":
            got = got[0] if isinstance(got, list) and len(got) == 1 else got
        if want is None or want == []:
            continue  # not rendered: the engine's own default applies (the served name: the checkpoint's)
        assert got == want, f"{path}: the engine parsed {got!r}, the profile says {want!r}"
    assert parsed["trust_remote_code"] is profile.model.trust_remote_code
    assert parsed["enforce_eager"] is profile.engine.enforce_eager


@pytest.mark.usefixtures("vllm_engine")
@pytest.mark.parametrize("name", ["cpu-smoke", "gb10-tp2", "rtx-pro-6000-tp2"])
def test_the_engine_parses_exactly_the_shipped_profiles_values(name: str) -> None:
    profile = load_profile(name).profile
    at = resolve_placement(profile, Placement(node_rank=0, master_addr="10.1.0.1"))
    _parsed_matches_profile(build_plan(profile, at).argv, profile)


@pytest.mark.usefixtures("vllm_engine")
@pytest.mark.parametrize("value", HOSTILE_BUT_LEGAL)
def test_the_engine_parses_hostile_but_legal_text_as_the_profiles_value(value: str) -> None:
    overrides = [f"server.served_model_name={value!r}", f"model.checkpoint={value!r}",
                 f"engine.logits_processors=[{value!r}, 'b:C']"]
    profile = load_profile("cpu-smoke", cli_overrides=overrides).profile
    _parsed_matches_profile(build_plan(profile, resolve_placement(profile, Placement())).argv, profile)
