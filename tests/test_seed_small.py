"""Small seed corrections (issue 15 item 8): a declared dependency, a per-node knob kept out of the profile
digest, and attributions that say where a figure comes from."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from appliance.profile import load_profile

ROOT = Path(__file__).resolve().parent.parent


def test_packaging_is_a_declared_dependency_because_versions_check_imports_it():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"packaging\b", d) for d in deps)
    assert "from packaging" in (ROOT / "appliance" / "lock.py").read_text()


def _compose_env(value: str, env: dict[str, str]) -> str:
    """Compose's `${NAME:-default}` interpolation, enough for the x-env values."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m[1]) or m[2], value)


def test_two_nodes_with_different_health_ports_keep_the_same_profile_digest_under_compose():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    raw = compose["services"]["gb10-tp2"]["environment"]["APPLIANCE_SET"]
    digests = set()
    for port in ("8470", "9500"):
        sets = [s for s in _compose_env(raw, {"APPLIANCE_HEALTH_PORT": port}).split(";") if s.strip()]
        digests.add(load_profile("gb10-tp2", env_overrides=sets).digest)
    assert len(digests) == 1


def test_the_ib_disabled_figure_is_attributed_to_the_seeds_harness_not_the_seed():
    for path in (ROOT / "appliance" / "profile" / "model.py", ROOT / "docs" / "containers.md"):
        text = " ".join(path.read_text().split())
        assert "15.1 vs 21.9" in text
        assert "the seed measured 15.1" not in text and "harness baselines" in text, path
