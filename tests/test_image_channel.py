"""Image channels (issue 32 item 3): a channel whose engine is a published image pinned by digest. Its lock cites a
public source for every pin field, a build without a digest is refused by name, its facts are its base release's
plus a cited overlay, the image build's facts check names the entry that differs, and its profile follows LIL's
serve recipe row by row. Nothing here pulls or builds an image (no registry is reachable): the build is held as
text and its comparison step as a function."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance.channels.facts import Overlay, load_facts, load_overlay
from appliance.cli import main
from appliance.container import buildargs
from appliance.errors import ApplianceError
from appliance.lock import IMAGE_FIELDS, load_lock
from appliance.lockfile import base_channel, load
from tooling import channel_rehearsal
from tooling.channel_facts import apply_overlay, overlay_problems

ROOT = Path(__file__).resolve().parents[1]
KK = "lil-kk-20260922"
LOCK = load(ROOT / "versions.json")
PROFILE = ROOT / "profiles" / "rtx-pro-6000-tp2-lil-kk.yaml"


def test_appliance_channels_lists_the_image_channel(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["channels"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(KK))
    assert "@sha256:37a1aeeaddad12f395eec8735e56b62443a0c091a0657cc97bda22e55d276d88" in row and "community" in row


def test_the_image_channels_lock_pins_by_digest_and_cites_every_pin_field() -> None:
    eng = load_lock().channel(KK).engine
    assert eng.source == "image" and re.fullmatch(r"sha256:[0-9a-f]{64}", eng.digest or "")
    assert eng.facts_engine == ("vllm", "0.33.0") and base_channel(LOCK, KK) == "vllm-0.33.0"
    assert all(len(eng.confirmed[k]) > 40 for k in IMAGE_FIELDS)
    assert all(re.fullmatch(r"[\w./-]+@(sha256:)?[0-9a-f]{40,64}", v) for v in eng.components.values())


@pytest.mark.parametrize(("change", "needle"), [
    (lambda e: e["confirmed"].pop("digest"), "engine.confirmed has no digest"),
    (lambda e: e.update(digest="sha256:abc"), "is no image digest"),
    (lambda e: e.pop("base"), "an image engine needs base"),
])
def test_an_image_channel_without_a_cited_pin_or_a_real_digest_is_refused(tmp_path: Path, change, needle) -> None:
    doc = copy.deepcopy(LOCK)
    change(doc["channels"][KK]["engine"])
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ApplianceError) as exc:
        load_lock(path)
    assert needle in exc.value.message


def test_the_build_takes_the_image_by_digest_and_refuses_a_channel_without_one() -> None:
    args = buildargs.lock_args(LOCK, KK)
    digest = LOCK["channels"][KK]["engine"]["digest"]
    assert args["ENGINE_SOURCE"] == "image" and args["ENGINE_IMAGE"].endswith(f"@{digest}")
    assert args["TORCH_CUDA_ARCH_LIST_AMD64"] == "12.0a" and "TORCH_CUDA_ARCH_LIST_ARM64" not in args
    doc = copy.deepcopy(LOCK)
    doc["channels"][KK]["engine"]["digest"] = None  # a Spark record that names no digest: never a tag pull
    with pytest.raises(ApplianceError) as exc:
        buildargs.lock_args(doc, KK)
    assert exc.value.field == "engine.digest" and "no public release record" in exc.value.message


def test_the_bake_target_builds_the_prebuilt_stage_whose_facts_check_runs_the_overlay_check() -> None:
    bake = (ROOT / "docker-bake.hcl").read_text()
    target = bake.split(f'target "gpu-{KK}" {{', 1)[1].split("}", 1)[0]
    assert 'target    = "gpu-prebuilt"' in target and '["linux/amd64"]' in target
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM ${ENGINE_IMAGE} AS gpu-prebuilt-base" in dockerfile
    check = dockerfile.split("AS gpu-prebuilt-facts-check", 1)[1].split("\nFROM ", 1)[0]
    assert "-m tooling.channel_facts overlay-check --channel" in check
    assert "COPY --from=gpu-prebuilt-facts-check" in dockerfile.split("AS gpu-prebuilt\n", 1)[1]


def test_the_committed_facts_are_the_base_releases_plus_the_overlay() -> None:
    base = json.loads((ROOT / "channels" / "facts" / "vllm-0.33.0.json").read_text())
    mine = json.loads((ROOT / "channels" / "facts" / f"{KK}.json").read_text())
    assert mine == apply_overlay({**base, "channel": KK}, load_overlay(KK, ROOT))
    assert load_facts(KK).flags.keys() - load_facts("vllm-0.33.0").flags.keys() == {
        "--prefill-compute-share", "--max-parallel-prefills"}


def test_the_in_image_facts_check_stops_on_a_difference_naming_the_entry() -> None:
    committed = json.loads((ROOT / "channels" / "facts" / f"{KK}.json").read_text())
    overlay = load_overlay(KK, ROOT)
    fresh = copy.deepcopy(committed)  # what the image's own vLLM would give: here, exactly the committed facts
    fresh["flags"]["--prefill-compute-share"] = {"form": "value", "default": 0.5}  # a default the source never showed
    assert overlay_problems(fresh, overlay, committed, engine="the image") == []
    fresh["flags"].pop("--max-parallel-prefills")
    fresh["env"].pop(next(iter(committed["env"])))
    fresh["registries"]["moe_backends"].remove("b12x")
    problems = overlay_problems(fresh, overlay, committed, engine="the image")
    assert problems[0].startswith("overlay flags.--max-parallel-prefills: the image has null, the overlay says "
                                  '{"form": "value"}')
    assert f"env {next(iter(committed['env']))}: in the committed facts, not in the image" in problems
    assert "registries.moe_backends b12x: in the committed facts, not in the image" in problems
    assert "flags --max-parallel-prefills: in the committed facts, not in the image" in problems
    assert len(problems) == 4


def test_a_removed_overlay_entry_that_the_image_still_has_is_named() -> None:
    overlay = Overlay.model_validate({"schema": 1, "channel": KK, "base": "vllm==0.33.0", "entries": [
        {"section": "flags", "name": "--model", "remove": True, "source": "a test: the image would lack it"}]})
    facts = {"flags": {"--model": {"form": "value"}}}
    assert overlay_problems(facts, overlay, facts, engine="the image") == [
        "overlay flags.--model: the image still has it (a test: the image would lack it)"]


def test_the_rehearsal_resolves_nothing_for_an_image_channel() -> None:
    assert channel_rehearsal.resolve(LOCK, KK) == {
        "resolved": False, "why": "an image channel's stack is its published image's, pinned by digest"}


def test_the_lil_profile_validates_renders_the_recipe_and_cites_it_for_every_setting(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "rtx-pro-6000-tp2-lil-kk"]) == 0
    capsys.readouterr()
    assert main(["render", "rtx-pro-6000-tp2-lil-kk"]) == 0
    argv = capsys.readouterr().out
    for word in ("--tensor-parallel-size 2", '"method":"dspark","num_speculative_tokens":5,"draft_sample_method":'
                 '"probabilistic"', "--kv-cache-dtype fp8", "--max-num-batched-tokens 4096", "--max-num-seqs 8",
                 "--gpu-memory-utilization 0.975", "--moe-backend b12x", "--max-model-len 1048576",
                 '--override-generation-config \'{"temperature":1.0,"top_p":0.95}\''):
        assert word in argv, word
    # every setting of the profile's own sections sits under a comment that names its row of the recipe
    lines = PROFILE.read_text().splitlines()
    settings = [i for i, line in enumerate(lines) if re.match(r"^  [a-z_]+:", line)
                and not lines[i].startswith("  channel:")]
    section = {i: next(lines[j] for j in range(i, -1, -1) if re.match(r"^[a-z]", lines[j])) for i in settings}
    checked = [i for i in settings if section[i].split(":")[0] in ("engine", "speculative", "parallel", "cache",
                                                                     "limits")]
    assert len(checked) == 13
    for i in checked:
        j = i - 1
        while not lines[j].lstrip().startswith("#"):
            assert re.match(r"^  [a-z_]+:", lines[j]), (lines[i], lines[j])
            j -= 1
        block = []
        while lines[j].lstrip().startswith("#"):
            block.append(lines[j])
            j -= 1
        assert any("recipe" in b for b in block), lines[i]
    assert yaml.safe_load(PROFILE.read_text())["engine"]["channel"] == KK


def test_the_prebuilt_stages_first_runs_pass_on_the_locks_args_and_stop_on_any_other(tmp_path: Path) -> None:
    """What gpu-prebuilt-base runs by path before the appliance is installed (lockcli verify, lockcli version), run
    the same way here: a bare interpreter with only the files that stage copies."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    stage = dockerfile.split("AS gpu-prebuilt-base\n", 1)[1].split("\nFROM ", 1)[0]
    copies = re.findall(r"^COPY ((?:[^\n]*\\\n)*[^\n]*)", stage, re.M)
    for copy_line in copies:
        *sources, dest = copy_line.replace("\\\n", " ").split()
        if dest.startswith("/opt/appliance/lock/"):
            folder = tmp_path / dest.removeprefix("/opt/appliance/")
            folder.mkdir(parents=True, exist_ok=True)
            for source in sources:
                (folder / Path(source).name).write_bytes((ROOT / source).read_bytes())
    lockcli = tmp_path / "lock" / "appliance" / "container" / "lockcli.py"
    base = [sys.executable, "-I", "-S", str(lockcli), "--versions", str(ROOT / "versions.json"), "--channel", KK]
    args = buildargs.lock_args(LOCK, KK)

    def run(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *argv], capture_output=True, text=True, timeout=60, check=False,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})

    assert run("verify", env=args).returncode == 0
    drift = run("verify", env=args | {"ENGINE_IMAGE": LOCK["channels"][KK]["engine"]["image"]})  # the tag alone
    assert drift.returncode != 0 and "build arg ENGINE_IMAGE=" in drift.stderr
    benchy = run("version", "llama-benchy", env={})
    assert benchy.returncode == 0 and benchy.stdout.strip() == next(
        p["version"] for p in LOCK["channels"][KK]["packages"] if p["name"] == "llama-benchy")
