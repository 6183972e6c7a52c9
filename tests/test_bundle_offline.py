"""The offline bundle end to end on the CPU smoke profile, with the network cut off.

On this (connected) machine: `appliance bundle create cpu-smoke` with the real CPU image (`docker save`), its
wheelhouse and the prepared smoke model. Then, inside a network namespace made
here with only a loopback interface (`unshare --net`): `bundle verify`, `bundle apply` into an empty home (the
image `docker load`ed again under its tag: the Docker engine is reached over its Unix socket, no network), and
`appliance run cpu-smoke` from `offline.env` (HF_HUB_OFFLINE=1) answering a completion on loopback; the loaded
image runs `appliance versions --check` with `--network none`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BIN
from tests.container_tools import docker
from tests.test_container_engine import cpu_image  # noqa: F401  (the session's CPU image, built once)

pytestmark = pytest.mark.docker


@pytest.fixture
def tmp_home(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, emptied afterwards: the bundle and what apply unpacks are ~9 GB that pytest would keep."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_bundle_applied_where_there_is_no_network_serves_the_cpu_smoke_profile(
        cpu_image: str, smoke_model_dir: Path, tmp_home: Path, unshare_exe: str, ip_exe: str) -> None:  # noqa: F811
    tmp_path = tmp_home
    connected = tmp_path / "connected"
    connected.mkdir()
    # No first serve here (CI time): carrying warm caches is tests/test_bundle.py's and the warm-start benchmark's
    # (`--from-bundle`); this test is the image, the checkpoint and the serve with the network cut off.
    tag = f"appliance-bundle-test:{int(time.time())}"  # a tag of its own: apply must bring it back by loading
    docker("tag", cpu_image, tag)
    bundle = tmp_path / "bundle"
    env = {**os.environ, "APPLIANCE_HOME": str(connected / "home"), "APPLIANCE_MODEL_DIR": str(smoke_model_dir)}
    started = time.monotonic()
    made = subprocess.run([str(BIN / "appliance"), "bundle", "create", "cpu-smoke", "--out", str(bundle), "--image",
                           tag], env=env, capture_output=True, text=True, timeout=1800)
    create_s = time.monotonic() - started
    assert made.returncode == 0, made.stderr
    docker("image", "rm", tag)  # the offline machine has no such image until apply loads it
    manifest = json.loads((bundle / "manifest.json").read_text())
    # `docker save`: Docker 25+ writes an OCI image layout, docker.io 20.10 (Debian 12's) the older docker-save
    # archive; both carry manifest.json naming the saved tag, which is what `docker load` reads back.
    with tarfile.open(bundle / manifest["image"]["archive"]) as archive:
        names = set(archive.getnames())
        member = archive.extractfile("manifest.json") if "manifest.json" in names else None
        saved = json.loads(member.read()) if member else []
    assert [tag] in [entry.get("RepoTags") for entry in saved], (sorted(names)[:10], saved)
    offline = tmp_path / "offline"
    script = textwrap.dedent(f"""\
        set -u
        ip link set lo up
        echo "LINKS $(ip -o link show | awk -F': ' '{{print $2}}' | tr '\\n' ' ')"
        {BIN}/appliance bundle verify {bundle}; echo "VERIFY rc=$?"
        export APPLIANCE_HOME={offline}/home HF_HOME={offline}/hf
        {BIN}/appliance bundle apply {bundle}; echo "APPLY rc=$?"
        set -a; . {offline}/home/offline.env; set +a
        docker run --rm --network none --entrypoint appliance {tag} versions --check >/dev/null 2>&1; echo "IMAGE rc=$?"
        PATH={BIN}:$PATH {BIN}/appliance run --run-dir {offline}/run > {offline}/serve.out 2>&1 &
        serve=$!
        for i in $(seq 1 600); do curl -fsS http://127.0.0.1:8000/health >/dev/null 2>&1 && break; sleep 1; done
        echo "ANSWER $(curl -fsS http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
            -d '{{"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 4}}')"
        kill -TERM $serve; wait $serve
        echo "ROUTES $(ip route show | wc -l) $(ip -6 route show | grep -vcE '^(::1|fe80)' || true)"
        """)
    try:
        done = subprocess.run([unshare_exe, "--net", "bash", "-c", script], capture_output=True, text=True,
                              timeout=1200, env={k: v for k, v in os.environ.items()
                                                 if not k.startswith(("HF_", "APPLIANCE_"))})
    finally:
        docker("image", "rm", tag, check=False)
    out = done.stdout
    said = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines() if " " in line
            and line.split(" ", 1)[0] in ("LINKS", "VERIFY", "APPLY", "IMAGE", "ANSWER", "ROUTES")}
    assert said.get("LINKS", "").split() == ["lo"], out  # nothing but loopback in the namespace
    assert said.get("VERIFY") == "rc=0" and said.get("APPLY") == "rc=0", out + done.stderr
    assert said.get("IMAGE") == "rc=0", out  # the loaded image runs with --network none
    answer = json.loads(said.get("ANSWER") or "{}")
    assert answer.get("choices") and answer["choices"][0]["text"], out + (offline / "serve.out").read_text()[-3000:]
    assert said.get("ROUTES") == "0 0", out  # and no route out of it: nothing is tried beyond loopback
    sizes = {part: sum(f["size"] for f in manifest["files"] if f["path"].startswith(prefix) and not f.get("link"))
             for part, prefix in (("model", "model/"), ("image", "image/"), ("wheelhouse", "wheelhouse/"),
                                  ("caches", "caches/"))}
    report = os.environ.get("APPLIANCE_BUNDLE_REPORT")
    if report:
        Path(report).write_text(json.dumps({"total_bytes": manifest["total_bytes"], "parts": sizes,
                                            "files": len(manifest["files"]), "create_s": round(create_s, 1)},
                                           indent=1))
    assert sizes["image"] > 10**9 and sizes["model"] > 10**8
