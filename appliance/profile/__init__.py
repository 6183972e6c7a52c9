"""Serve profiles: the typed model, the strict loader with `extends`, overrides with origins.

The names are imported on first use (PEP 562): `appliance.profile.names` (what shell completion asks) must not pay
for pydantic and the models, which importing the loader here would."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.profile.loader import LoadedProfile, load_profile
    from appliance.profile.model import Profile
    from appliance.profile.names import list_profiles

__all__ = ["LoadedProfile", "Profile", "list_profiles", "load_profile"]

_WHERE = {"LoadedProfile": "appliance.profile.loader", "load_profile": "appliance.profile.loader",
          "Profile": "appliance.profile.model", "list_profiles": "appliance.profile.names"}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
