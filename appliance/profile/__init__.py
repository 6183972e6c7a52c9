"""Serve profiles: the typed model, the strict loader with `extends`, overrides with origins."""

from appliance.profile.loader import LoadedProfile, list_profiles, load_profile
from appliance.profile.model import Profile

__all__ = ["LoadedProfile", "Profile", "list_profiles", "load_profile"]
