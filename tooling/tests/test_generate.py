"""The generator of compose.yaml and docker-bake.hcl (tooling/generate.py): the committed files are what it writes,
and its layouts cover every served profile with one compose profile per hardware layout. What the generated files
must say for the images and Docker is tests/test_container_static.py's."""

from __future__ import annotations

import subprocess
import sys

import yaml

from appliance.profile import list_profiles, load_profile
from tooling import generate

ROOT = generate.ROOT
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
LAYOUTS = generate.layouts()


def test_compose_yaml_and_docker_bake_hcl_are_what_the_generator_writes() -> None:
    assert generate.stale(ROOT) == [], "run `python -m tooling.generate --write`"


def test_the_generator_runs_from_the_repository_root_and_says_when_a_file_is_stale() -> None:
    done = subprocess.run([sys.executable, "-m", "tooling.generate", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_one_compose_profile_per_hardware_layout_covering_every_served_profile() -> None:
    services = COMPOSE["services"]
    covered = {p for lay in LAYOUTS for p in lay.serve_profiles}
    test_only = {name for name in list_profiles()
                 if load_profile(name).profile.hardware.gpu == "cpu" and load_profile(name).profile.hardware.nodes > 1}
    assert covered | test_only == set(list_profiles())
    assert {"gb10-tp2", "rtx-pro-6000-tp2", "rtx-5090-tp8", "cpu-smoke"} <= set(services)
    for lay in LAYOUTS:
        svc = services[lay.name]
        assert svc["profiles"] == [lay.name]
        assert svc["x-appliance"]["serve_profiles"] == list(lay.serve_profiles)
        for name in lay.serve_profiles:
            hw = load_profile(name).profile.hardware
            assert (hw.gpu, hw.nodes, hw.gpus_per_node) == (lay.gpu, lay.nodes, lay.gpus_per_node)
