"""A strict YAML loader: duplicate keys and YAML-1.1 booleans (yes/no/on/off) are errors.

Plain ``yaml.safe_load`` lets a duplicated key silently win and reads ``off`` as False;
in a serve profile either one is a quiet misconfiguration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from appliance.errors import ApplianceError


class _StrictLoader(yaml.SafeLoader):
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
                f"{loader.source}:{key_node.start_mark.line + 1}: duplicate key {key!r} "
                f"(first at line {seen[key]})",
                field=str(key),
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
_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def load_text(text: str, source: str = "<yaml>") -> Any:
    loader = _StrictLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ApplianceError(
            f"{source}: not valid YAML: {exc}", fix="correct the YAML syntax at the place named"
        ) from None
    finally:
        loader.dispose()


def load_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ApplianceError(f"cannot read {path}: {exc.strerror}", value=str(path)) from None
    return load_text(text, str(path))


def parse_scalar(text: str, source: str) -> Any:
    """Read one override value (``--set a.b=VALUE``) with the same strict rules as a profile."""
    return load_text(text, source)

