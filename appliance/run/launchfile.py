"""RUN_DIR/launch.json: the resolved launch, written once by `appliance run`, read by every program it starts.

supervisord.conf carries only the appliance's own commands and paths; each value that came from a profile,
a flag or the environment (served model name, description, --set values, addresses) stays in this file,
so nothing a user typed is ever parsed by supervisor. The exporter judges the profile stored here, the one
the engine was started with, not the YAML as it reads when the exporter (re)starts.

Standard library only: `appliance exec` reads it on every engine (re)start without importing pydantic.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 1


@dataclass(frozen=True)
class Program:
    """One program as it runs: argv (argv[0] absolute where this environment has it) and the env it adds."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchFile:
    profile_name: str
    profile_digest: str
    profile_source: str
    profile: dict[str, Any]
    """The resolved profile (every override applied), as JSON."""
    role: str
    node_rank: int
    programs: dict[str, Program]
    """supervisord program name -> what `appliance exec` runs: the engine and any setup step."""
    exporter_args: list[str]
    """The exporter's arguments (log, port, rank, engine URL, peers), read by `appliance exporter --launch`."""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "profile": {"name": self.profile_name, "digest": self.profile_digest, "source": self.profile_source,
                        "resolved": self.profile},
            "role": self.role, "node_rank": self.node_rank,
            "programs": {name: {"argv": p.argv, "env": p.env} for name, p in self.programs.items()},
            "exporter_args": self.exporter_args,
        }

    def text(self) -> str:
        """The file's content; written through the one writer (appliance/safe_write.py) with supervisord.conf,
        so a program (re)started never reads half of it or a launch.json of another config."""
        return json.dumps(self.to_json(), indent=1) + "\n"

    def write(self, path: Path) -> None:
        """launch.json alone, through the one writer (`appliance run` writes it with its supervisord.conf)."""
        from appliance.safe_write import write_file

        write_file(path, self.text(), field="launch.json")


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
            raise LaunchFileError(f"{path}: schema {data.get('schema')!r}, this appliance reads {SCHEMA}")
        prof = data["profile"]
        return LaunchFile(
            profile_name=prof["name"], profile_digest=prof["digest"], profile_source=prof["source"],
            profile=prof["resolved"], role=data["role"], node_rank=int(data["node_rank"]),
            programs={name: _program(name, p) for name, p in data["programs"].items()},
            exporter_args=list(data["exporter_args"]))
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
