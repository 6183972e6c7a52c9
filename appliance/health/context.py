"""Wiring shared by `appliance logscan` and `appliance exporter`: profile + role + lock -> Judge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from appliance.health.expect import Judge
from appliance.health.table import LogTable, Role, load_table
from appliance.lock import ChannelLock, channel_lock
from appliance.profile.loader import LoadedProfile
from appliance.profile.topology import rank_view, role_for


def lock_versions(lock: ChannelLock) -> dict[str, str]:
    """The channel's pins by name: what `lock.<package>` in an expectation compares with."""
    return {p.name: p.version for p in lock.pins()}


@dataclass(frozen=True)
class HealthContext:
    loaded: LoadedProfile
    table: LogTable
    lock: ChannelLock
    """The lock of the profile's channel: its pins are what expectations compare with."""
    lock_digest: str

    @classmethod
    def load(cls, loaded: LoadedProfile, table_path: Path | None = None,
             lock: ChannelLock | None = None) -> HealthContext:
        """`lock`: the lock of the profile's channel where the caller holds it (the resolved serve's), else read."""
        lock = lock or channel_lock(loaded.profile.engine.channel, loaded.profile.hardware.target)
        return cls(loaded, load_table(table_path), lock, lock.digest)

    def role(self, node_rank: int) -> Role:
        return role_for(self.loaded.profile, node_rank)

    def judge(self, role: Role, node_rank: int | None = None) -> Judge:
        """The judge of one node; `node_rank` None: the head (node 0), or the first worker for role worker."""
        profile = self.loaded.profile
        node = rank_view(profile, node_rank) if node_rank is not None else role
        return Judge(self.table, profile, node, lock_versions(self.lock))
