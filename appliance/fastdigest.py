"""BLAKE2 without OpenSSL: `hashlib` loads libcrypto first (~3 ms), a tenth of a replayed answer (replay.py) and a
share of a scan's start (health/compiled.py). CPython's own `_blake2` gives the same digests."""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

__all__ = ["blake2b"]
