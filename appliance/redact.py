"""The one redaction: text from outside (a process command line, a log line, a serve's reply, a receipt) passes here
before the appliance echoes it, prints it, writes it to a file or puts it in a metric label. A leaf module (stdlib
only), so a probe-like command can use it for free.

What becomes `***`:
- the values of the secret environment variables (HF_TOKEN, VLLM_API_KEY, APPLIANCE_SYNC_SECRET) wherever they
  appear, also in their escaped forms (as `repr()` and JSON write a backslash, a quote or U+200B);
- the argument after a secret-named flag: `--api-key X`, `--api-keys X`, `--hf-token=X`, `--token X`,
  `--api-key "X"`, `--api-key 'X'`, and the list form `['--api-key', 'X']`;
- the value of a key that names a secret: `token=X`, `tokens=X`, `api_key: X`, `HF_TOKEN=X`, `"password": "X"`,
  and a list of them, `"api_key": ['X', 'Y']` (vLLM's own `non-default args:` line);
- an Authorization header's credentials (`Authorization: Bearer X`, `Authorization: Basic X`, `Authorization:X`),
  `Bearer X` anywhere, a Hugging Face token (`hf_…`), and the password of `scheme://user:X@host`.

Order matters: mask first, then escape or truncate (`clip`): a secret cut in two by a 60-character limit, or
escaped by `repr()`, no longer matches, and would leak in part.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

SECRET_ENV = ("HF_TOKEN", "VLLM_API_KEY", "APPLIANCE_SYNC_SECRET")
LIBRARY_SECRET_ENV = ("HUGGING_FACE_HUB_TOKEN", "HF_OIDC_ID_TOKEN", "OAUTH_CLIENT_SECRET", "OPENAI_API_KEY")
"""The other credentials the stack reads from its environment: huggingface_hub's utils/_auth.py reads
HUGGING_FACE_HUB_TOKEN (HF_TOKEN's older name, line 149) and HF_OIDC_ID_TOKEN (line 200), its constants.py
OAUTH_CLIENT_SECRET (line 325); vLLM's entrypoints/cli/openai.py OPENAI_API_KEY (line 34). Each value is masked
like SECRET_ENV's and none may be passed through a profile (render/managed.py); the Kubernetes Secret carries
SECRET_ENV only (the serve needs none of these)."""
MASK = "***"
MIN_SECRET = 4
"""Env values shorter than this are not searched for: masking every `1` in a text hides nothing and garbles all."""

# A key that names a secret ends in one of these words (`max_num_batched_tokens` does not: it ends in `tokens`, and
# a bare `tokens` counts only as `tokens=`: `"tokens": [1, 2]` is a tokenizer's answer, not a credential).
_SECRET_WORD = r"(?:token|api[-_]?keys?|secrets?|passwords?|passwd)"
_KEY = rf"(?:[\w.-]*{_SECRET_WORD}|tokens(?=\s*=))"
_FLAG = re.compile(rf"(?i)(?<![\w-])--[\w-]*{_SECRET_WORD}(?![\w-])")
_KEY_VALUE = re.compile(rf"(?i)(?<![\w-]){_KEY}[\"']?\s*[=:]\s*")
_AUTHORIZATION = re.compile(r"(?i)(?<![\w-])authorization[\"']?\s*[=:]\s*(?:(?:bearer|basic|token|digest)\s+)?")
_SIMPLE = (
    re.compile(r"(?i)(\bBearer\s+)([\w.~+/=-]+)"),
    re.compile(r"()\bhf_[A-Za-z0-9]{16,}\b()"),
    re.compile(r"(://[^/\s:@]*:)([^\s/]+)(?=@)"),  # greedy: a password holding '@' is masked up to the last one
)
_BARE_STOP = frozenset(" \t\r\n\"',;&)]}>")


def _env_secrets(env: Mapping[str, str] | None) -> list[str]:
    env = os.environ if env is None else env
    values = {env.get(name, "") for name in (*SECRET_ENV, *LIBRARY_SECRET_ENV)}
    forms = set()
    for v in values:
        if len(v) >= MIN_SECRET:
            # The value itself and the ways an escaper writes it: repr() and JSON turn a backslash, a quote or a
            # format character into an escape, which the plain value would no longer match.
            forms |= {v, repr(v)[1:-1], json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1],
                      v.encode("unicode_escape").decode("ascii")}
    # Longest first: a secret that contains another is masked whole.
    return sorted((f for f in forms if len(f) >= MIN_SECRET), key=len, reverse=True)


def _value_end(text: str, at: int) -> tuple[int, int, bool]:
    """Where the value starting at `at` is: (start, end, is_list) of what to mask — a quoted string's inside, the
    items of a `[...]` list, or a bare word up to a space or punctuation."""
    if at < len(text) and text[at] in "\"'":
        quote, i = text[at], at + 1
        while i < len(text) and text[i] != quote:
            i += 2 if text[i] == "\\" else 1
        return at + 1, min(i, len(text)), False
    if at < len(text) and text[at] == "[":
        close = text.find("]", at)
        return at + 1, len(text) if close < 0 else close, True
    i = at
    while i < len(text) and text[i] not in _BARE_STOP:
        i += 1
    return at, i, False


_LIST_ITEM = re.compile(r"""(["'])((?:\\.|(?!\1).)*)\1|[^\s,"'\]]+""")


def _mask_list(inner: str) -> str:
    """Each item of a list of secrets (`'X', 'Y'` or `X, Y`) masked; the quotes and commas kept."""
    return _LIST_ITEM.sub(lambda m: f"{m.group(1)}{MASK}{m.group(1)}" if m.group(1) else MASK, inner)


def _mask_after(pattern: re.Pattern[str], text: str, *, list_form: bool = False) -> str:
    """Mask the value that follows each match of `pattern`."""
    out, pos = [], 0
    for m in pattern.finditer(text):
        if m.start() < pos:
            continue
        at = m.end()
        if list_form:  # `'--api-key', 'X'`: the flag closes its quote, a comma, then the value
            sep = re.match(r"[\"']\s*,\s*", text[at:])
            if sep is None:
                sep = re.match(r"\s+|=", text[at:])
                if sep is None:
                    continue
            at += sep.end()
        start, end, is_list = _value_end(text, at)
        if end <= start:
            continue
        out.append(text[pos:start])
        out.append(_mask_list(text[start:end]) if is_list else MASK)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with every secret it carries replaced by `***` (`env` defaults to this process's environment)."""
    for secret in _env_secrets(env):
        text = text.replace(secret, MASK)
    text = _mask_after(_FLAG, text, list_form=True)
    text = _mask_after(_AUTHORIZATION, text)
    text = _mask_after(_KEY_VALUE, text)
    for pattern in _SIMPLE:
        text = pattern.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return text


def redact_tree(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """A JSON-like value (a receipt, a /status body) with every string in it redacted; keys kept. Iterative over
    containers it built itself, so a deep document cannot overflow the stack here."""
    if isinstance(value, str):
        return redact(value, env)
    if not isinstance(value, dict | list | tuple):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        node, parent, slot = stack.pop()
        if isinstance(node, str):
            parent[slot] = redact(node, env)
        elif isinstance(node, dict):
            copy: dict[Any, Any] = dict.fromkeys(node)
            parent[slot] = copy
            stack.extend((v, copy, k) for k, v in node.items())
        elif isinstance(node, list | tuple):
            items: list[Any] = [None] * len(node)
            parent[slot] = items
            stack.extend((v, items, i) for i, v in enumerate(node))
        else:
            parent[slot] = node
    return root[0]


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def is_unsafe(ch: str) -> bool:
    """A character no terminal line should get raw: control (C0, DEL, C1, ESC), format (U+202E bidi override,
    U+200B zero width, U+FEFF), surrogate, private-use or unassigned, or a line/paragraph separator."""
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def printable(text: str) -> str:
    """`text` with every character is_unsafe() names written as an escape (`\\x1b`, `\\u202e`): a log line or a
    serve's reply cannot move the cursor, clear the screen or reorder what follows it."""
    if text.isprintable():
        return text
    return "".join(_escape(ch) if is_unsafe(ch) else ch for ch in text)


def clip(text: str, limit: int | None = None, env: Mapping[str, str] | None = None) -> str:
    """Text from outside as the appliance shows it: masked, then escaped, then cut to `limit` characters (with
    `…`). One line, no secret, no terminal control, bounded."""
    shown = printable(redact(text, env))
    if limit is not None and len(shown) > limit:
        return shown[:limit] + "…"
    return shown
