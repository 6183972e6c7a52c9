"""The resolved serve: every fact of one serve, resolved once (appliance/serve/resolve.py), typed and frozen, and
passed on; launch.json is its serialization (run/launch.py writes it, run/launch_profile.py reads it back).

    loaded      the validated profile, each value with its origin, and its digest
    lock        the lock of the profile's channel (its pins and digest)
    facts       the catalogue's GPU and checkpoint family, the channel's capabilities (from its extracted facts)
    place       this node's placement, each value with its origin, a multi-node rank's network identity included
    plan        argv, env and setup steps: what every view renders (shell, JSON, supervisord, manifests)
    run         where `appliance run` starts it: each supervisord program and its section (None for a render)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from appliance.lock import ChannelLock
from appliance.placement import ResolvedPlacement
from appliance.profile.loader import LoadedProfile
from appliance.profile.model import Profile
from appliance.profile.topology import Role
from appliance.render.planfacts import PlanFacts
from appliance.render.serveplan import ServePlan
from appliance.render.supervisord import CrashguardSection, LogtailSection
from appliance.serve.sections import ExporterSection, Program

ENGINE = "vllm"
"""The engine's supervisord program."""
CANARY = "canary"
"""The canary's watch, where the profile runs one on this node."""
FRONT = "front"
"""The HTTP front on the API port (server.front): it forwards each request to the engine front.json names."""
FRONT_STATE = "front.json"
"""In the run folder: {"backend": URL}, the engine the front forwards to (`appliance run` writes its own engine's,
`upgrade promote --beside` a bridge's while the engine restarts)."""


@dataclass(frozen=True)
class RunSections:
    """What `appliance run` adds where it starts the serve: each supervisord program and its section."""

    run_dir: Path
    programs: Mapping[str, Program]
    """What `appliance exec` runs, by supervisord program: the setup steps, the engine, the canary's watch."""
    exporter: ExporterSection
    crashguard: CrashguardSection
    logtail: LogtailSection

    @property
    def engine(self) -> Program:
        return self.programs[ENGINE]

    @property
    def canary(self) -> Program | None:
        return self.programs.get(CANARY)


@dataclass(frozen=True)
class ResolvedServe:
    loaded: LoadedProfile
    lock: ChannelLock
    facts: PlanFacts
    place: ResolvedPlacement
    plan: ServePlan
    run: RunSections | None = field(default=None)

    @property
    def profile(self) -> Profile:
        return self.loaded.profile

    @property
    def role(self) -> Role:
        return self.place.role

    def started(self, plan: ServePlan, run: RunSections) -> ResolvedServe:
        """This serve as `appliance run` starts it: its plan's programs made absolute on this host, and its run
        sections."""
        return replace(self, plan=plan, run=run)
