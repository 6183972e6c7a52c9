"""A strict JSON reader for every JSON document the appliance reads back: receipts, calibrations, launch.json, the
canary's state, fabric reports, and the replies of serves and peers (which may be hostile or broken).

Plain `json.loads` accepts what the readers behind it cannot live with: a duplicated key (the last one silently
wins), `NaN`/`Infinity`, an integer of 400 digits (a count no reader can turn into a float), a lone UTF-16
surrogate (`"\\ud800"`: any later `.encode()` fails), and nesting a few hundred levels deep (the recursion of a
model validator, a redaction or a printer overflows). Each is refused here with JsonError, naming the source and
where in the document. Stdlib only, like yamlstrict.py's JSON-side twin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeAlias

JsonValue: TypeAlias = "str | int | float | bool | list[JsonValue] | dict[str, JsonValue] | None"
"""A JSON value: what this reader returns, and what the appliance's own documents hold once written."""
JsonObject: TypeAlias = "dict[str, JsonValue]"
"""A JSON object the appliance writes from a typed record (a dataclass's or a model's `to_json`): its shape is that
record's; this type says only that nothing but JSON is in it. Data the appliance does not define (the engine's
replies, a tool's output, a Kubernetes object) is typed where it is read, not with this."""

MAX_DEPTH = 64
"""Levels of objects/arrays: our deepest document (a receipt) has about 8."""
MAX_INT_DIGITS = 20
"""A count, a byte size or a timestamp fits in 20 digits; 10^400 is no number a reader can use."""


class JsonError(ValueError):
    """The text is no JSON this appliance reads (syntax, duplicate key, NaN, a huge number, too deep, bad text).
    `problem` is the message without the source."""

    def __init__(self, message: str, problem: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem or message


def _pairs(pairs: list[tuple[str, Any]]) -> JsonObject:
    out: JsonObject = {}
    for key, value in pairs:
        if key in out:
            raise JsonError(f"duplicate key {key[:60]!r}: with duplicate keys the last one silently wins")
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonError(f"an integer of {len(text.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JsonError(f"the number {text[:40]} is beyond a float's range")
    return value


class _Constant:
    """NaN or Infinity where the text had it, so the walk can say where (a reader names the field)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _constant(name: str) -> Any:
    return _Constant(name)


def _walk(value: Any, max_depth: int) -> None:
    """Iteratively (no recursion of our own): depth and text of every key and string."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, str):
            _text(node, where)
            continue
        if isinstance(node, _Constant):
            raise JsonError(f"{node.name} at {where or 'the top'} is no JSON number")
        if not isinstance(node, dict | list):
            continue
        if depth >= max_depth:
            raise JsonError(f"nested more than {max_depth} levels deep (at {where or 'the top'})")
        if isinstance(node, dict):
            for key, child in reversed(node.items()):  # depth first, in document order: the first problem is named
                _text(key, where)
                stack.append((child, depth + 1, f"{where}.{key[:40]}" if where else key[:40]))
        else:
            stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in reversed(list(enumerate(node))))


def _text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonError(f"a lone surrogate in a string (at {where or 'the top'}): no text") from None


def loads(raw: bytes | str, source: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The document in `raw` (UTF-8 bytes or text), or JsonError naming `source` and the problem."""
    try:
        return _loads(raw, max_depth)
    except JsonError as exc:
        raise JsonError(f"{source}: {exc.problem}", exc.problem) from None


def _loads(raw: bytes | str, max_depth: int) -> Any:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise JsonError(f"not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                           parse_constant=_constant)
    except JsonError:
        raise
    except RecursionError:
        raise JsonError("nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError: the message names line and column
        raise JsonError(f"not JSON: {str(exc)[:200]}") from None
    _walk(value, max_depth)
    return value


def load_file(path: Path, field: str, max_bytes: int, what: str) -> Any:
    """A JSON file read with read_capped's refusals (no FIFO, device or folder; at most `max_bytes`); ApplianceError
    naming `field` when it is missing, no regular file, too big or no JSON this reader takes."""
    from appliance.errors import ApplianceError
    from appliance.paths import read_capped
    from appliance.redact import clip

    raw = read_capped(path, field, max_bytes, what)
    try:
        return loads(raw, str(path))
    except JsonError as exc:
        shown = clip(str(path), 512)
        raise ApplianceError(f"{what} {shown} is not readable JSON: {exc.problem}", field=field, value=shown,
                             fix=f"give the {what} the appliance wrote, unedited",
                             reason="the reader refuses what it cannot trust rather than misread it") from None
