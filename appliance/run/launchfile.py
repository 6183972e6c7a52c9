"""RUN_DIR/launch.json: the resolved launch, written once by `appliance run`, read by every program it starts.

supervisord.conf carries only the appliance's own commands and paths; each value that came from a profile,
a flag or the environment (served model name, description, --set values, addresses) stays in this file,
so nothing a user typed is ever parsed by supervisor. The exporter judges the profile stored here, the one
the engine was started with, not the YAML as it reads when the exporter (re)starts.

The serialization of the resolved serve (appliance/serve/resolved.py; docs/launch-handoff.md): `placement` is this
node's place resolved once, each value with its origin (appliance/placement.py); `plan` the plan its programs were
made from; `exporter` is the exporter's section as data, from which `appliance exporter --launch` builds its config
directly (no flags re-parsed). A new input of the exporter is a field of ExporterSection (appliance/serve/sections.py),
written by `run/launch.py` and read in `commands/exporter.py`; nothing else changes. run/launch_profile.py reads
the file back into the typed ResolvedServe.

Standard library only: `appliance exec` reads it on every engine (re)start without importing pydantic.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.jsonstrict import JsonObject
from appliance.placement import ResolvedPlacement
from appliance.serve.sections import ExporterSection, PlanSection, Program

if TYPE_CHECKING:
    from appliance.profile.topology import Role

SCHEMA = 2


@dataclass(frozen=True)
class LaunchFile:
    profile_name: str
    profile_digest: str
    profile_source: str
    profile: JsonObject
    """The resolved profile (every override applied), as JSON."""
    placement: ResolvedPlacement
    """This node's place in the serve, resolved once, each value with its origin."""
    programs: dict[str, Program]
    """supervisord program name -> what `appliance exec` runs: the engine and any setup step."""
    exporter: ExporterSection
    profile_origins: dict[str, str] = field(default_factory=dict)
    """Where each value of `profile` came from (`LoadedProfile.origins`): the canary's ladder reads the keys a
    command-line --set pins from here, so no program of the serve loads the YAML again."""
    plan: PlanSection | None = None
    """The plan the programs were made from (absent in a launch.json written before it was kept)."""

    @property
    def role(self) -> Role:
        return self.placement.role

    @property
    def node_rank(self) -> int:
        return self.placement.node_rank

    def to_json(self) -> JsonObject:
        return {
            "schema": SCHEMA,
            "profile": {"name": self.profile_name, "digest": self.profile_digest, "source": self.profile_source,
                        "resolved": self.profile, "origins": self.profile_origins},
            "placement": self.placement.to_json(),
            "programs": {name: {"argv": p.argv, "env": p.env} for name, p in self.programs.items()},
            "exporter": self.exporter.to_json(),
        } | ({} if self.plan is None else {"plan": self.plan.to_json()})

    def text(self) -> str:
        """The file's content; written through the one writer (appliance/safe_write.py) with supervisord.conf,
        so a program (re)started never reads half of it or a launch.json of another config."""
        return json.dumps(self.to_json(), indent=1) + "\n"

    def write(self, path: Path) -> None:
        """launch.json alone, through the one writer (`appliance run` writes it with its supervisord.conf)."""
        from appliance.safe_write import write_file

        write_file(path, self.text(), field="launch.json", mode=LAUNCH_MODE)


LAUNCH_MODE = 0o600
"""launch.json holds each program's environment (a passed variable, a token the caller set): its owner's only."""


class LaunchFileError(ValueError):
    """launch.json is missing, unreadable or not one this appliance wrote."""


MAX_LAUNCH_BYTES = 16 << 20
"""A launch.json is a few KiB (the resolved profile, the argv and env of each program)."""


def _program(name: str, p: Any) -> Program:
    """One program, typed: an argv of at least the program itself, text only; an env of text to text."""
    argv, env = p["argv"], p["env"]
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise LaunchFileError(f"program {name!r}: argv must be a non-empty list of words, starting with the program")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise LaunchFileError(f"program {name!r}: env must map names to text")
    return Program(list(argv), dict(env))


def _origins(data: Any) -> dict[str, str]:
    """profile.origins: dotted path -> origin, text only (absent in a launch.json written before it was kept)."""
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise LaunchFileError("profile.origins must map dotted paths to their origin, as text")
    return dict(data)


def read_launch(path: Path) -> LaunchFile:
    from appliance.errors import ApplianceError
    from appliance.jsonstrict import load_file

    try:
        try:  # no FIFO, device or folder; bounded; strict JSON (duplicate keys, NaN, deep nesting refused)
            data = load_file(path, "--launch", MAX_LAUNCH_BYTES, "launch file")
        except ApplianceError as exc:
            raise LaunchFileError(exc.message) from None
        if not isinstance(data, dict) or not isinstance(data.get("programs"), dict):
            raise LaunchFileError(f"{path} is no launch file (no `programs` object)")
        if data.get("schema") != SCHEMA:
            raise LaunchFileError(f"{path}: schema {data.get('schema')!r}, this appliance reads {SCHEMA} "
                                  "(run `appliance run` again to rewrite it)")
        prof = data["profile"]
        return LaunchFile(
            profile_name=prof["name"], profile_digest=prof["digest"], profile_source=prof["source"],
            profile=prof["resolved"], placement=ResolvedPlacement.from_json(data["placement"]),
            programs={name: _program(name, p) for name, p in data["programs"].items()},
            exporter=ExporterSection.from_json(data["exporter"]), profile_origins=_origins(prof.get("origins", {})),
            plan=PlanSection.from_json(data["plan"]) if "plan" in data else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, LaunchFileError):
            raise
        raise LaunchFileError(f"cannot read the launch file {path}: {exc}") from None


def exec_program(path: Path, name: str) -> None:
    """Replace this process with program `name` of the launch file (supervisord's engine and setup steps):
    same pid, so supervisord stops and signals the engine itself."""
    launch = read_launch(path)
    if name not in launch.programs:
        raise LaunchFileError(f"{path} has no program {name!r} (it has {', '.join(sorted(launch.programs))})")
    program = launch.programs[name]
    os.execvpe(program.argv[0], program.argv, os.environ | program.env)
