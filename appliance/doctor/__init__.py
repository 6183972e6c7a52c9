"""Preflight checks before a serve starts: GPU, memory, a stale engine, version drift."""

from appliance.doctor.report import Check, run_doctor

__all__ = ["Check", "run_doctor"]
