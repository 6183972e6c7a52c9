"""A copy of the appliance's data root (appliance.paths.DATA: versions.json, profiles/, channels/, healthchecks/,
monitoring/) that a test may edit or break; APPLIANCE_ROOT points a call at it."""

from __future__ import annotations

import shutil
from pathlib import Path

from appliance.paths import DATA

ROOT = Path(__file__).resolve().parent.parent


def copy_data_root(parent: Path) -> Path:
    """`parent`/root holding a copy of each of the checkout's data entries."""
    root = parent / "root"
    root.mkdir()
    for name in DATA:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name)
        elif src.exists():
            shutil.copy(src, root / name)
    return root
