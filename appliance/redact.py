"""The one redaction: text from outside (a process command line, a log line, a receipt) passes here before
the appliance echoes it. A leaf module (stdlib only), so a probe-like command can use it for free.

What becomes `***`:
- the values of the secret environment variables (HF_TOKEN, VLLM_API_KEY, APPLIANCE_SYNC_SECRET) wherever they
  appear;
- the argument after a secret-named flag: `--api-key X`, `--hf-token=X`, `--token X`;
- `key=value` / `key: value` where the key names a secret (`token=`, `api_key:`, `HF_TOKEN=`, `"password": "…"`);
- `Bearer X` (an Authorization header), a Hugging Face token (`hf_…`), and the password of `scheme://user:pw@host`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

SECRET_ENV = ("HF_TOKEN", "VLLM_API_KEY", "APPLIANCE_SYNC_SECRET")
MASK = "***"
MIN_SECRET = 4
"""Env values shorter than this are not searched for: masking every `1` in a text hides nothing and garbles all."""

# A key that names a secret ends in one of these words (`max_num_batched_tokens` does not: it ends in `tokens`).
_SECRET_WORD = r"(?:token|api[-_]?key|secret|password|passwd)"
_PATTERNS = (
    # --api-key VALUE, --hf-token VALUE (the value as the next argv word)
    re.compile(rf"(?i)((?<![\w-])--[\w-]*{_SECRET_WORD}\s+)([^\s\"']+)"),
    # token=VALUE, --api-key=VALUE, HF_TOKEN=VALUE, "api_key": "VALUE", password: VALUE
    re.compile(rf"(?i)((?<![\w-])[\w.-]*{_SECRET_WORD}[\"']?\s*[=:]\s*[\"']?)([^\s\"',;&]+)"),
    re.compile(r"(?i)(\bBearer\s+)([\w.~+/=-]+)"),
    re.compile(r"()\bhf_[A-Za-z0-9]{16,}\b()"),
    re.compile(r"(://[^/\s:@]+:)([^@\s/]+)(?=@)"),
)


def _env_secrets(env: Mapping[str, str] | None) -> list[str]:
    env = os.environ if env is None else env
    values = [env.get(name, "") for name in SECRET_ENV]
    # Longest first: a secret that contains another is masked whole.
    return sorted({v for v in values if len(v) >= MIN_SECRET}, key=len, reverse=True)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with every secret it carries replaced by `***` (`env` defaults to this process's environment)."""
    for secret in _env_secrets(env):
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return text


def redact_tree(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """A JSON-like value (a receipt, a /status body) with every string in it redacted; keys kept."""
    if isinstance(value, str):
        return redact(value, env)
    if isinstance(value, dict):
        return {k: redact_tree(v, env) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v, env) for v in value]
    return value
