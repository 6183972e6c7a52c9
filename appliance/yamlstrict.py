"""A strict YAML loader: duplicate keys and YAML-1.1 booleans (yes/no/on/off) are errors.

Plain ``yaml.safe_load`` lets a duplicated key silently win and reads ``off`` as False;
in a serve profile either one is a quiet misconfiguration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml

from appliance.bounds import show
from appliance.errors import ApplianceError

Model = TypeVar("Model")


# libyaml's parser when PyYAML was built with it (its wheels are): the same nodes, marks and results as the
# pure-Python one at a tenth of the CPU (a profile's load is most of `validate`'s own time), and its own nesting
# cap instead of Python's recursion. The resolvers and constructors below are Python either way.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Base):  # type: ignore[valid-type,misc]
    source: str = "<yaml>"


def _no_ambiguous_bool(loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
    value = loader.construct_scalar(node)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    mark = node.start_mark
    raise ApplianceError(
        f"{loader.source}:{mark.line + 1}: ambiguous boolean {value!r}",
        value=value,
        fix="write true or false (or quote the word if you mean the string)",
        reason="YAML 1.1 reads yes/no/on/off as booleans, YAML 1.2 as strings; a profile must mean one thing",
    )


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ApplianceError(
                f"{loader.source}:{key_node.start_mark.line + 1}: duplicate key {show(key)} "
                f"(first at line {seen[key]})",
                field=show(key),
                fix="keep one of the two entries",
                reason="with duplicate keys the last one silently wins",
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


# Booleans: only true/false. Everything else that 1.1 calls a bool goes to the checker.
_StrictLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE|y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$"),
    list("tTfFyYnNoO"),
)
_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _no_ambiguous_bool)

# Numbers YAML 1.1 reads one way and YAML 1.2 (and JSON) another: base 60 (`34:08` is 2048), a leading zero as
# octal (`010` is 8), `0b` binary, `_` separators (1.2 reads all of these as text).
_AMBIGUOUS_NUMBER = re.compile(r"[:_]|^[-+]?0[0-7]+$|^[-+]?0b", re.IGNORECASE)


def _no_ambiguous_number(kind: str) -> Any:
    construct = getattr(yaml.SafeLoader, f"construct_yaml_{kind}")

    def checked(loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
        raw = str(node.value)
        if _AMBIGUOUS_NUMBER.search(raw):
            raise ApplianceError(
                f"{loader.source}:{node.start_mark.line + 1}: ambiguous number {raw!r}",
                value=raw, fix="write the number in plain decimal (or quote it if you mean the text)",
                reason="YAML 1.1 reads 34:08 as 2048 (base 60), 010 as 8 and 1_000 as 1000; YAML 1.2 reads them as "
                       "text: a profile must mean one thing")
        return construct(loader, node)

    return checked


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _no_ambiguous_number("int"))
# `1e3` is text to YAML 1.1 (its floats need a dot) and a float to YAML 1.2 and JSON: read as the float.
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"),
                                    list("-+0123456789"))
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _no_ambiguous_number("float"))
_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


MAX_BYTES = 1 << 20
"""A profile is a few hundred bytes; a bigger file is a mistake or an attack on the loader."""
MAX_NODES = 20_000
"""Values after alias expansion: a few anchors referring to each other (a "billion laughs") stay small on
disk and become billions of values in memory."""


def _expanded_size(root: yaml.Node, source: str) -> int:
    """Nodes the document holds once every alias is expanded; stops at MAX_NODES or at a self-reference."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise ApplianceError(f"{source}: an alias refers to the node that holds it",
                                 fix="remove the self-referencing anchor/alias",
                                 reason="a self-referencing value has no end")
        visiting.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                raise ApplianceError(
                    f"{source}: more than {MAX_NODES:,} values once its aliases are expanded",
                    fix="write the values out instead of nesting aliases",
                    reason="nested aliases grow exponentially (a \"billion laughs\"): the loader caps them")
        visiting.discard(key)
        sizes[key] = total
        return total

    return size(root)


def load_text(text: str, source: str = "<yaml>") -> Any:
    """The document, or ApplianceError: nothing the YAML library, the date/int constructors or the
    interpreter's stack raise gets past this function."""
    if len(text) > MAX_BYTES:
        raise ApplianceError(f"{source}: {len(text):,} characters, over the {MAX_BYTES:,} limit",
                             fix="a profile is a small file; give the right one",
                             reason="the loader caps its input so a huge file cannot exhaust memory")
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)
        loader.source = source
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's cap: the same document the pure parser recursed on
            raise _too_deep(source) from None
        raise ApplianceError(
            f"{source}: not valid YAML: {_short(exc)}", fix="correct the YAML syntax at the place named"
        ) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # an invalid date (2026-13-45), an integer past Python's digit limit, an unhashable (list) key
        raise ApplianceError(f"{source}: a value YAML cannot represent: {_short(exc)}",
                             fix="correct the value (dates as YYYY-MM-DD, keys as plain words, numbers of "
                                 "sensible size)", reason="the profile must load to plain values") from None
    except RecursionError:
        raise _too_deep(source) from None
    finally:
        if loader is not None:
            loader.dispose()


def _too_deep(source: str) -> ApplianceError:
    return ApplianceError(f"{source}: nested too deeply to read", fix="a profile has sections of plain values",
                          reason="the YAML reader caps the levels of nesting it follows")


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def load_file(path: Path) -> Any:
    from appliance.paths import read_capped

    raw = read_capped(path, "profile", MAX_BYTES, "YAML file")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        raise ApplianceError(f"{path}: not UTF-8 ({'UTF-16' if utf16 else f'byte {exc.start}'})", value=str(path),
                             fix="save the file as UTF-8", reason="profiles are UTF-8 text") from None
    return load_text(text, str(path))


def parse_scalar(text: str, source: str) -> Any:
    """Read one override value (``--set a.b=VALUE``) with the same strict rules as a profile."""
    return load_text(text, source)


def load_data_table(path: Path, model: type[Model], what: str) -> Model:
    """A data file the appliance ships (catalogue, log checks, kernel checks, canary probes) read strictly and
    validated against its pydantic model; a bad entry is exit 2 naming every invalid key, never a traceback."""
    from pydantic import BaseModel, ValidationError

    assert issubclass(model, BaseModel)
    try:
        return model.model_validate(load_file(path))  # type: ignore[return-value]
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ApplianceError(f"{path}: invalid {what}\n    " + "\n    ".join(lines), value=str(path),
                             fix="correct the entries named above (the header of the file explains each key)") from None
