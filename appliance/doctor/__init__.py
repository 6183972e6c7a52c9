"""Preflight checks before a serve starts: GPU, memory, a stale engine, version drift."""

from appliance.doctor.report import Check, checks_text, run_doctor

__all__ = ["Check", "checks_text", "run_doctor"]
