"""The names of the serve profiles, read from the profiles folder alone: what shell completion asks on every TAB
(`appliance profiles --names`), so it imports neither pydantic nor YAML."""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ApplianceError
from appliance.paths import profiles_dir

NOT_PROFILES = ("catalogue",)
"""YAML files of the profiles folder that are no serve profile (bases/ is a folder and never listed)."""


def list_profiles(root: Path | None = None) -> list[str]:
    """Names of the serve profiles (bases/ and the catalogue are not profiles)."""
    root = root or profiles_dir()
    names = sorted(p.stem for p in root.glob("*.yaml") if p.stem not in NOT_PROFILES)
    if not names:  # an install without its data would otherwise list nothing and say `known profiles:` and no name
        from appliance.bounds import show

        raise ApplianceError(f"no serve profile in {show(str(root), 512)}", field="APPLIANCE_ROOT", value=str(root),
                             fix="set APPLIANCE_ROOT to the folder holding versions.json and profiles/ (a checkout, "
                             "or /opt/appliance in the image), or install the wheel built from a full checkout",
                             reason="the profiles, the lock and the log checks ship as data beside the code")
    return names
