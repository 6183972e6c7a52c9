"""Where a container deployment reads its active channel, and how promote and rollback switch it.

- compose: an env file (`promote --compose-env FILE`) that `docker compose --env-file FILE` reads: the candidate
  channel's image (`APPLIANCE_GPU_IMAGE` / `APPLIANCE_CPU_IMAGE`, which compose.yaml interpolates) and the active
  channel with the overrides it carries (`APPLIANCE_UPGRADE_CHANNEL`, `APPLIANCE_UPGRADE_SET`, which compose.yaml
  passes into the container, where the profile loader reads them as the upgrade layer). The file is replaced by a
  rename; the one it replaced is kept beside it as FILE.previous, the rollback target. The same file on every node
  of a multi-node serve is one decision for every rank (U5). With `--compose-file`, promote also recreates the
  service (`docker compose up -d`) and proves it (ready, first canary rounds) or switches the file back.
- Kubernetes: the manifests (`promote --k8s-out DIR`), re-rendered from the same ServePlan for the candidate (its
  image, `engine.channel` and the move's overrides in APPLIANCE_SET), the previous ones kept as the rollback target;
  `kubectl apply -f` puts them in place (one LeaderWorkerSet template for every rank of a multi-node serve).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.profile.active import CHANNEL_ENV, SET_ENV, Active

PREVIOUS = ".previous"
HEADER = ("# Written by `appliance upgrade promote` (and `rollback`): the serve's active engine channel.\n"
          "# Read with: docker compose --env-file .env --env-file THIS_FILE --profile LAYOUT up -d\n")


def image_var(target: str) -> str:
    return "APPLIANCE_GPU_IMAGE" if target == "gpu" else "APPLIANCE_CPU_IMAGE"


@dataclass(frozen=True)
class ComposeEnv:
    """The upgrade's keys of a compose env file."""

    image: str | None
    image_key: str
    active: Active | None
    decision: str | None = None


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines (compose's env-file syntax, the subset this module writes: no quotes, no expansion)."""
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def read_compose_env(path: Path, profile: str, target: str) -> ComposeEnv | None:
    try:
        values = parse_env_file(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ApplianceError(f"{path}: {exc.strerror}", field="--compose-env", value=str(path)) from None
    channel = values.get(CHANNEL_ENV, "")
    sets = [s.strip() for s in values.get(SET_ENV, "").split(";") if s.strip()]
    active = Active(profile, channel, sets, values.get("APPLIANCE_UPGRADE_DECISION"),
                    origin=f"env:{CHANNEL_ENV} ({path})") if channel else None
    return ComposeEnv(values.get(image_var(target)), image_var(target), active,
                      values.get("APPLIANCE_UPGRADE_DECISION"))


def compose_text(env: ComposeEnv) -> str:
    lines = [HEADER]
    if env.image:
        lines.append(f"{env.image_key}={env.image}")
    if env.active is not None:
        for item in env.active.sets:
            if ";" in item or "\n" in item:
                raise ApplianceError(f"--with {item!r} holds ';' or a newline, which an env file cannot carry",
                                     field="--with", value=item, fix="drop the ';' from the value")
        lines += [f"{CHANNEL_ENV}={env.active.channel}", f"{SET_ENV}={';'.join(env.active.sets)}",
                  f"APPLIANCE_UPGRADE_DECISION={env.decision or ''}"]
    return "\n".join(lines) + "\n"


def write_compose_env(path: Path, env: ComposeEnv | None, keep_previous: bool = True) -> None:
    """Replace the file by a rename (a reader never sees half); the old one becomes FILE.previous. None: the profile's
    own channel and the layout's default image again (the file emptied of the upgrade's keys)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = path.with_name(path.name + PREVIOUS)
    if keep_previous and path.exists():
        shutil.copy2(path, previous)
    elif keep_previous:
        previous.write_text(HEADER)  # nothing before: rolling back empties it
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(compose_text(env) if env else HEADER)
    os.replace(tmp, path)


def restore_compose_env(path: Path) -> None:
    """FILE.previous back in place of FILE (the rollback); FILE's content becomes the new FILE.previous."""
    previous = path.with_name(path.name + PREVIOUS)
    if not previous.exists():
        raise ApplianceError(f"{previous} does not exist: nothing to roll back to", field="--compose-env",
                             value=str(path), fix="`appliance upgrade status` shows the history")
    swap = path.with_name(f".{path.name}.{os.getpid()}.swap")
    shutil.copy2(previous, swap)
    if path.exists():
        shutil.copy2(path, previous)
    os.replace(swap, path)


def compose_service(compose_file: Path, profile: str) -> str:
    """The compose service (the hardware layout) whose serve profiles hold `profile`."""
    import yaml

    try:
        doc = yaml.safe_load(compose_file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ApplianceError(f"cannot read {compose_file}: {exc}", field="--compose-file",
                             value=str(compose_file)) from None
    for name, svc in (doc.get("services") or {}).items():
        if profile in ((svc or {}).get("x-appliance") or {}).get("serve_profiles", []):
            return str(name)
    raise ApplianceError(f"{compose_file} has no service serving profile {profile}", field="--compose-file",
                         value=str(compose_file), fix="give the compose.yaml of this repository (generated from "
                                                      "profiles/)")


def compose_command() -> list[str]:
    """`$APPLIANCE_COMPOSE` (a command line), else `docker compose`, else `docker-compose`."""
    given = os.environ.get("APPLIANCE_COMPOSE")
    if given:
        return shlex.split(given)
    if shutil.which("docker"):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise ApplianceError("no docker compose here", field="--compose-file",
                         fix="install Docker's compose plugin (or set APPLIANCE_COMPOSE), or leave --compose-file out "
                             "and run `docker compose up -d` yourself")


def compose_up(compose_file: Path, env_files: list[Path], service: str, timeout: float = 600) -> str:
    argv = [*compose_command(), "-f", str(compose_file), "--project-directory", str(compose_file.parent)]
    for env in env_files:
        argv += ["--env-file", str(env)]
    argv += ["--profile", service, "up", "-d", "--no-deps", service]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ApplianceError(f"{shlex.join(argv)} failed: {(done.stdout + done.stderr).strip()[-800:]}",
                             field="--compose-file", value=str(compose_file))
    return (done.stdout + done.stderr).strip()


# --- Kubernetes --------------------------------------------------------------------------------------------------

def k8s_paths(out: Path, profile: str) -> tuple[Path, Path]:
    return out / f"{profile}.yaml", out / f"{profile}{PREVIOUS}.yaml"


def write_manifests(out: Path, profile: str, text: str) -> tuple[Path, Path]:
    current, previous = k8s_paths(out, profile)
    out.mkdir(parents=True, exist_ok=True)
    if current.exists():
        shutil.copy2(current, previous)
    tmp = current.with_name(f".{current.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, current)
    return current, previous


def restore_manifests(out: Path, profile: str) -> Path:
    current, previous = k8s_paths(out, profile)
    if not previous.exists():
        raise ApplianceError(f"{previous} does not exist: nothing to roll back to", field="--k8s-out", value=str(out),
                             fix="`appliance upgrade status` shows the history")
    swap = current.with_name(f".{current.name}.{os.getpid()}.swap")
    shutil.copy2(previous, swap)
    if current.exists():
        shutil.copy2(current, previous)
    os.replace(swap, current)
    return current
