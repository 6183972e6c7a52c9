"""The wheel carries the runtime package and nothing of tooling/ (built for real, as the image's wheel stage builds
it: `pip wheel --no-deps --no-build-isolation`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_built_wheel_holds_every_runtime_module_and_no_build_tooling(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for package in ("appliance", "tooling"):  # tooling sits beside appliance, as in the checkout
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("appliance-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {n.split("/")[0] for n in names} == {"appliance", f"{wheel.name.split('-py')[0]}.dist-info"}
    assert not [n for n in names if "tooling" in n.split("/")]
    runtime = {p.relative_to(ROOT).as_posix() for p in (ROOT / "appliance").rglob("*.py")}
    assert runtime <= names, sorted(runtime - names)
    assert any(n.startswith("appliance/render/schemas/") and n.endswith(".json") for n in names)
