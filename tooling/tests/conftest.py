"""tests/conftest.py's engine fixture and the hook that derives the `engine` marker from it, for these tests too
(a conftest applies to its own folder only)."""

from tests.conftest import pytest_collection_modifyitems, vllm_engine

__all__ = ["pytest_collection_modifyitems", "vllm_engine"]
