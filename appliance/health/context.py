"""Wiring shared by `appliance logscan` and `appliance exporter`: profile + role + lock -> Judge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from appliance.health.expect import Judge
from appliance.health.table import LogTable, Role, load_table
from appliance.lock import Lock, load_lock, lock_digest
from appliance.profile.loader import LoadedProfile
from appliance.profile.topology import rank_view, role_for


def lock_versions(lock: Lock) -> dict[str, str]:
    return {p.name: p.version for p in lock.packages}


@dataclass(frozen=True)
class HealthContext:
    loaded: LoadedProfile
    table: LogTable
    lock: Lock
    lock_digest: str

    @classmethod
    def load(cls, loaded: LoadedProfile, table_path: Path | None = None) -> HealthContext:
        return cls(loaded, load_table(table_path), load_lock(), lock_digest())

    def role(self, node_rank: int) -> Role:
        return role_for(self.loaded.profile, node_rank)

    def judge(self, role: Role, node_rank: int | None = None) -> Judge:
        """The judge of one node; `node_rank` None: the head (node 0), or the first worker for role worker."""
        profile = self.loaded.profile
        node = rank_view(profile, node_rank) if node_rank is not None else role
        return Judge(self.table, profile, node, lock_versions(self.lock))
