"""The release workflow (.github/workflows/release.yml): actionlint finds nothing in it (its expressions, job graph,
runner labels and, through ShellCheck, every `run:` script), nor in the same file with each action pinned by commit
read as the release its comment names (actionlint checks an action's inputs only by a version it knows); and the plan
it runs (tooling/release.py) bakes every released channel per platform under the names `appliance images` lists,
with SBOM and provenance attestations, and refuses a repository that is not the workflow owner's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance.lock import lock_document
from appliance.lockfile import channel_names, image_tag, platform_image, released
from tests.container_tools import tool
from tooling import release

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
LOCK = lock_document()
OWNER = LOCK["images"]["release"]["repository"].split("/")[1]
PINNED = re.compile(r"uses: ([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v(\d+)\.\d+\.\d+)$")


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    assert shutil.which("shellcheck"), "shellcheck is missing: apt-get install shellcheck (scripts/test.sh does)"
    return subprocess.run([tool("actionlint"), "-no-color", str(path)], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT)


def test_actionlint_finds_nothing_in_the_workflow() -> None:
    done = actionlint(WORKFLOW)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_every_action_is_pinned_by_commit_and_actionlint_checks_the_release_each_names(tmp_path: Path) -> None:
    text = WORKFLOW.read_text()
    uses = [line.strip() for line in text.splitlines() if "uses:" in line]
    assert uses and all(PINNED.search(u) for u in uses), [u for u in uses if not PINNED.search(u)]
    # The same workflow with each pin read as its major release (what actionlint's table of actions knows).
    as_tags = tmp_path / "release.yml"
    as_tags.write_text(re.sub(r"@[0-9a-f]{40} # v(\d+)\.\d+\.\d+", r"@v\1", text))
    assert "@v" in as_tags.read_text()
    done = actionlint(as_tags)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


@pytest.mark.parametrize(("before", "after", "complaint"), [
    ("github.repository_owner", "github.repo_owner", 'property "repo_owner" is not defined'),
    ('read -r -a sources <<< "$SOURCES"', "cd $SOURCES", "SC2086"),
    ("needs: [plan, build]", "needs: [plan, bild]", 'job "index" needs job "bild" which does not exist'),
])
def test_actionlint_bites_on_this_workflow(tmp_path: Path, before: str, after: str, complaint: str) -> None:
    broken = tmp_path / "release.yml"
    assert before in WORKFLOW.read_text()
    broken.write_text(WORKFLOW.read_text().replace(before, after))
    done = actionlint(broken)
    assert done.returncode == 1 and complaint in done.stdout, done.stdout


def test_the_workflow_bakes_from_the_plan_with_attestations_and_least_privilege() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    assert doc["permissions"] == {}
    assert jobs["plan"]["permissions"] == {"contents": "read"}
    for name in ("build", "index"):
        assert jobs[name]["permissions"] == {"contents": "read", "packages": "write"}
    plan = " ".join(s.get("run", "") for s in jobs["plan"]["steps"])
    assert "python -m tooling.release matrix" in plan and '>> "$GITHUB_OUTPUT"' in plan
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.builds) }}"
    assert jobs["index"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.indexes) }}"
    bake = next(s["run"] for s in jobs["build"]["steps"] if "run" in s)
    assert 'docker buildx bake "$TARGET"' in bake and '--set "$TARGET.tags=$IMAGE"' in bake
    assert "--sbom=true" in bake and "--provenance=mode=max" in bake and "output=type=registry" in bake
    # The only secret is the job's own token, given to the registry login; nothing is echoed.
    secrets = set(re.findall(r"secrets\.(\w+)", WORKFLOW.read_text()))
    assert secrets == {"GITHUB_TOKEN"}
    logins = [s for j in jobs.values() for s in j["steps"] if s.get("uses", "").startswith("docker/login-action@")]
    assert len(logins) == 2 and all(s["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}" for s in logins)
    checkouts = [s for j in jobs.values() for s in j["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == 2 and all(s["with"]["persist-credentials"] is False for s in checkouts)


def test_the_plan_bakes_every_released_channel_per_platform_under_the_names_images_lists() -> None:
    builds, indexes = release.plan(LOCK, OWNER.upper())  # GitHub owners are case-insensitive; ghcr's names are not
    shipped = [n for n in channel_names(LOCK) if released(LOCK, n)]
    assert shipped and [i["channel"] for i in indexes] == shipped
    bake = (ROOT / "docker-bake.hcl").read_text()
    for index in indexes:
        platforms = LOCK["channels"][index["channel"]]["images"]["platforms"]
        mine = [b for b in builds if b["channel"] == index["channel"]]
        assert [b["platform"] for b in mine] == platforms
        assert index["image"] == image_tag(LOCK, index["channel"])
        assert index["sources"].split() == [platform_image(LOCK, index["channel"], p) for p in platforms]
        for b in mine:
            arch = b["platform"].split("/")[1]
            assert b["runner"] == release.RUNNERS[arch]
            # The one-platform target of the bake file, which builds that platform only.
            assert re.search(rf'target "{re.escape(b["bake_target"])}" {{\n  inherits  = \[[^]]+\]\n  '
                             rf'platforms = \["{re.escape(b["platform"])}"\]', bake), b["bake_target"]


def test_the_plan_takes_larger_runners_and_one_channel() -> None:
    builds, indexes = release.plan(LOCK, OWNER, "vllm-0.32.0", {"amd64": "big-x64", "arm64": ""})
    assert [i["channel"] for i in indexes] == ["vllm-0.32.0"]
    assert {b["platform"]: b["runner"] for b in builds} == {"linux/amd64": "big-x64",
                                                            "linux/arm64": release.RUNNERS["arm64"]}


@pytest.mark.parametrize(("args", "complaint"), [
    (["--owner", "someone-else"], "is not under ghcr.io/someone-else/"),
    (["--owner", OWNER, "--channel", "vllm-cpu-0.32.0"], "only gpu channels are released"),
    (["--owner", OWNER, "--channel", "vllm-9"], "no channel 'vllm-9'"),
])
def test_the_plan_refuses_another_owners_repository_and_an_unreleased_channel(args: list[str],
                                                                               complaint: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tooling.release", "matrix", *args], capture_output=True, text=True,
                          timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 2 and complaint in done.stderr and not done.stdout, done.stderr


def test_the_plan_prints_one_output_line_each_for_the_two_matrices() -> None:
    done = subprocess.run([sys.executable, "-m", "tooling.release", "matrix", "--owner", OWNER, "--channel", ""],
                          capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert set(lines) == {"builds", "indexes"}
    assert json.loads(lines["indexes"])["include"] == release.plan(LOCK, OWNER)[1]
