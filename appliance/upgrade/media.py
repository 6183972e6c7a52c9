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
MAX_COMPOSE_BYTES = 4 * 1024 * 1024
"""compose.yaml is tens of KiB."""
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


MAX_ENV_FILE_BYTES = 1024 * 1024
"""A compose env file is a few lines; more is no file promote wrote."""


def _read_text(path: Path, field: str, max_bytes: int, what: str) -> str:
    """A regular file of at most `max_bytes` as UTF-8 text (paths.read_capped: a FIFO or device is refused
    unopened); ApplianceError naming `field` otherwise."""
    from appliance.paths import read_capped

    raw = read_capped(path, field, max_bytes, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApplianceError(f"{what} {path} is not UTF-8 (byte {exc.start})", field=field, value=str(path),
                             fix=f"give the {what} as written, unedited") from None


def read_compose_env(path: Path, profile: str, target: str) -> ComposeEnv | None:
    if not os.path.lexists(path):
        return None
    values = parse_env_file(_read_text(path, "--compose-env", MAX_ENV_FILE_BYTES, "compose env file"))
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
    own channel and the layout's default image again (the file emptied of the upgrade's keys). Both through the one
    writer: a link or FIFO at either name is refused, never written through."""
    from appliance.safe_write import write_file

    path.parent.mkdir(parents=True, exist_ok=True)
    if keep_previous:
        before = _read_text(path, "--compose-env", MAX_ENV_FILE_BYTES, "compose env file") \
            if os.path.lexists(path) else HEADER  # nothing before: rolling back empties it
        write_file(path.with_name(path.name + PREVIOUS), before, field="--compose-env")
    write_file(path, compose_text(env) if env else HEADER, field="--compose-env")


def restore_compose_env(path: Path) -> None:
    """FILE.previous back in place of FILE (the rollback); FILE's content becomes the new FILE.previous."""
    from appliance.safe_write import write_files

    previous = path.with_name(path.name + PREVIOUS)
    if not os.path.lexists(previous):
        raise ApplianceError(f"{previous} does not exist: nothing to roll back to", field="--compose-env",
                             value=str(path), fix="`appliance upgrade status` shows the history")
    back = _read_text(previous, "--compose-env", MAX_ENV_FILE_BYTES, "compose env file")
    now = _read_text(path, "--compose-env", MAX_ENV_FILE_BYTES, "compose env file") \
        if os.path.lexists(path) else HEADER
    write_files({path: back, previous: now}, field="--compose-env")  # the swap, whole or not at all


def compose_service(compose_file: Path, profile: str) -> str:
    """The compose service (the hardware layout) whose serve profiles hold `profile`."""
    import yaml

    text = _read_text(compose_file, "--compose-file", MAX_COMPOSE_BYTES, "compose file")
    try:  # compose files use anchors and merge keys, which the profiles' strict YAML refuses: the library's reader
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise ApplianceError(f"cannot read {compose_file}: {str(exc)[:300]}", field="--compose-file",
                             value=str(compose_file), fix="give the compose.yaml of this repository") from None
    services = doc.get("services") if isinstance(doc, dict) else None
    for name, svc in (services.items() if isinstance(services, dict) else ()):
        marks = svc.get("x-appliance") if isinstance(svc, dict) else None
        serves = marks.get("serve_profiles") if isinstance(marks, dict) else None
        if isinstance(serves, list) and profile in serves:
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


MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""The rendered manifests of one serve are tens of KiB."""


def write_manifests(out: Path, profile: str, text: str) -> tuple[Path, Path]:
    """The candidate's manifests in place, the ones they replace kept as PROFILE.previous.yaml: both through the one
    writer (a link or FIFO at either name is refused, never written through), together or not at all."""
    from appliance.safe_write import write_files

    current, previous = k8s_paths(out, profile)
    out.mkdir(parents=True, exist_ok=True)
    files = {current: text}
    if os.path.lexists(current):
        files = {previous: _read_text(current, "--k8s-out", MAX_MANIFEST_BYTES, "manifests file"), **files}
    write_files(files, field="--k8s-out")
    return current, previous


def restore_manifests(out: Path, profile: str) -> Path:
    from appliance.safe_write import write_files

    current, previous = k8s_paths(out, profile)
    if not os.path.lexists(previous):
        raise ApplianceError(f"{previous} does not exist: nothing to roll back to", field="--k8s-out", value=str(out),
                             fix="`appliance upgrade status` shows the history")
    back = _read_text(previous, "--k8s-out", MAX_MANIFEST_BYTES, "manifests file")
    files = {current: back}
    if os.path.lexists(current):
        files[previous] = _read_text(current, "--k8s-out", MAX_MANIFEST_BYTES, "manifests file")
    write_files(files, field="--k8s-out")  # the swap, whole or not at all
    return current
