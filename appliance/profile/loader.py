"""Load a profile: bases it `extends`, then the profile, then env and CLI overrides.

Every leaf value keeps its origin (`base:bases/gb10`, `profile:gb10-tp2`, `env:APPLIANCE_SET`,
`cli:--set`, `default`) so `appliance config` can say where each value came from.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from appliance.bounds import check_text, check_tree, show
from appliance.errors import ApplianceError
from appliance.lockfile import canonical_digest
from appliance.paths import profiles_dir
from appliance.profile.model import Profile
from appliance.profile.names import list_profiles
from appliance.yamlstrict import load_file, parse_scalar

if TYPE_CHECKING:
    from appliance.profile.active import Active


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    source: Path
    origins: dict[str, str] = field(default_factory=dict)

    @cached_property
    def digest(self) -> str:
        return profile_digest(self.profile)

    def origin(self, path: str) -> str:
        return self.origins.get(path, "default")


def _as_before(dump: dict) -> dict:
    """A field added later, left at its default, is left out: a profile that does not use it keeps the digest it had
    before the field existed (caveats none, model.dtype auto, server.front off, server.engine_port unset): a serve
    started before keeps matching its qualifications, receipts and this shell's resolution."""
    if not dump.get("caveats", True):
        del dump["caveats"]
    if dump["model"].get("dtype") == "auto":
        del dump["model"]["dtype"]
    server = dump.get("server") or {}
    if server.get("front") is False:  # server.front and server.engine_port: added with the front (off by default)
        del server["front"]
    if "engine_port" in server and server["engine_port"] is None:
        del server["engine_port"]
    return dump


def profile_digest(profile: Profile) -> str:
    return canonical_digest(_as_before(profile.model_dump(mode="json")))


# What does not change the engine's compiled artefacts: names, ports, parsers, rendezvous, the memory watchdog,
# and the warnings a profile accepts.
_NOT_ENGINE = {"name", "description", "provenance", "server", "distributed", "memory", "caveats"}


def engine_digest(profile: Profile) -> str:
    """Digest of what shapes compiled kernels and graphs; keys the compile caches so a port change reuses them."""
    return canonical_digest(_as_before(profile.model_dump(mode="json", exclude=_NOT_ENGINE)))


def resolve_path(name_or_path: str, root: Path | None = None) -> Path:
    try:
        return _resolve_path(name_or_path, root or profiles_dir())
    except OSError as exc:  # a name too long for the file system, a component that is a file, ...
        raise ApplianceError(f"profile {show(name_or_path)}: {exc.strerror}", field="profile",
                             value=show(name_or_path), fix="give a profile name from `appliance profiles` or the "
                             "path of a YAML file") from None


def _resolve_path(name_or_path: str, root: Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if candidate.is_file():
            return candidate
        if candidate.is_symlink():
            raise ApplianceError(f"profile file {show(name_or_path)} is a symlink that leads nowhere (a loop or a "
                                 "missing target)", field="profile", value=show(name_or_path),
                                 fix="repair the link or give the file it should name")
        if candidate.exists():
            raise ApplianceError(f"profile file {show(name_or_path)} is not a regular file", field="profile",
                                 value=show(name_or_path), fix="give the path of a YAML file")
        raise ApplianceError(
            f"profile file {show(name_or_path)} does not exist",
            field="profile",
            value=show(name_or_path),
            fix="give a profile name from `appliance profiles` or the path of a YAML file",
        )
    path = root / f"{name_or_path}.yaml"
    if path.is_file() and name_or_path != "catalogue":
        return path
    if path.is_symlink():
        raise ApplianceError(f"profile {show(name_or_path)}: {path} is a symlink that leads nowhere (a loop or a "
                             "missing target)", field="profile", value=show(name_or_path),
                             fix=f"repair or remove {path}")
    names = list_profiles(root)
    close = difflib.get_close_matches(name_or_path, names, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ApplianceError(
        f"unknown profile {show(name_or_path)}",
        field="profile",
        value=name_or_path,
        fix=f"{hint}known profiles: {', '.join(names)}",
    )


def _merge(dst: dict[str, Any], src: dict[str, Any], origin: str, origins: dict[str, str], prefix: str) -> None:
    for key, value in src.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value, origin, origins, f"{path}.")
            continue
        dst[key] = copy.deepcopy(value)
        for stale in [p for p in origins if p == path or p.startswith(f"{path}.")]:
            del origins[stale]
        _mark(value, origin, origins, path)


def _mark(value: Any, origin: str, origins: dict[str, str], path: str) -> None:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            _mark(sub, origin, origins, f"{path}.{key}")
    else:
        origins[path] = origin


MAX_EXTENDS = 16
"""Distinct bases one `extends` may list (the shipped profiles list two)."""
MAX_LAYERS = 32
"""Distinct files one profile may be built from, bases of bases included."""


def _last_occurrence(paths: list[Path]) -> list[Path]:
    """Each file once, where it last appears. Applying a layer again overwrites everything it set before, so its
    earlier applications change nothing: the merged result is exactly that of the full list."""
    seen: set[Path] = set()
    out = [p for p in reversed(paths) if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]
    return out[::-1]


class _Layers:
    """The layers of one profile in application order: bases depth first, then the file; each file read once, each
    applied once (a base listed many times, or reached by many paths, costs one layer), their number capped. So
    19,000 entries of one base, or bases listing each other a hundred times, stay a handful of layers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data: dict[Path, dict[str, Any]] = {}
        self.order: dict[Path, list[Path]] = {}

    def of(self, path: Path, chain: tuple[Path, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
        return [(self._origin(p), self.data[p]) for p in self._linear(path, chain)]

    def _linear(self, path: Path, chain: tuple[Path, ...]) -> list[Path]:
        if path in chain:
            cycle = " -> ".join(p.stem for p in (*chain, path))
            raise ApplianceError(f"profile extends itself: {cycle}", field="extends", fix="remove the cycle")
        if path in self.order:
            return self.order[path]
        if len(self.data) >= MAX_LAYERS:
            raise self._too_many(path)
        data = load_file(path)
        if not isinstance(data, dict):
            raise ApplianceError(f"{path}: a profile must be a mapping of sections", value=type(data).__name__)
        self.data[path] = data
        bases = [self._base_path(path, base) for base in _extends(data.pop("extends", []), path)]
        bases = _last_occurrence(bases)
        if len(bases) > MAX_EXTENDS:
            raise ApplianceError(f"{path}: extends lists {len(bases)} different bases, more than {MAX_EXTENDS}",
                                 field="extends", value=len(bases), fix="build on a few bases (a base may extend "
                                 "others)", reason="every base is a layer read and merged; the loader caps them")
        order: list[Path] = []
        for base in bases:
            order += self._linear(base, (*chain, path))
        order = _last_occurrence([*order, path])
        if len(order) > MAX_LAYERS:
            raise self._too_many(path)
        self.order[path] = order
        return order

    def _too_many(self, path: Path) -> ApplianceError:
        return ApplianceError(f"{path}: built from more than {MAX_LAYERS} files (bases of bases included)",
                              field="extends", fix="flatten the bases", reason="every base is a layer read and "
                              "merged; the loader caps them, so a hostile extends graph cannot run for minutes")

    def _base_path(self, path: Path, base: str) -> Path:
        root = self.root
        base_path = root / f"{base}.yaml"
        try:
            ok = base_path.resolve().is_relative_to(root) and base_path.is_file()
        except (OSError, RuntimeError):  # a symlink loop, a name too long
            ok = False
        if not ok and base_path.is_symlink():
            raise ApplianceError(f"{path}: extends {show(base)}, a symlink that leads nowhere (a loop or a missing "
                                 "target)", field="extends", value=base, fix=f"repair or remove {base_path}")
        if not ok:
            raise ApplianceError(
                f"{path}: extends unknown base {show(base)}",
                field="extends",
                value=base,
                fix=f"bases live in {root}/bases/; known: "
                + ", ".join(f"bases/{p.stem}" for p in sorted((root / "bases").glob("*.yaml"))),
            )
        return base_path

    def _origin(self, path: Path) -> str:
        rel = path.relative_to(self.root).with_suffix("") if path.is_relative_to(self.root) else path
        kind = "base" if str(rel).startswith("bases/") else "profile"
        return f"{kind}:{rel}"


def _check_name(layers: _Layers, path: Path) -> None:
    """A profile's name is its file's stem: a file that declares another (so two profiles would answer to one name,
    and share its caches, receipts and Kubernetes objects) is refused, and so is a name in a base."""
    for file, data in layers.data.items():
        if "name" not in data:
            continue
        declared = data["name"]
        if file.resolve() == path.resolve() and declared == path.stem:
            continue
        where = "a base names no profile" if file.resolve() != path.resolve() else f"the file is {path.name}"
        raise ApplianceError(f"{file}: name {show(declared)} is not the file's name {show(file.stem)} ({where})",
                             field="name", value=show(declared),
                             fix=f"remove `name:` (a profile is named after its file) or rename the file to "
                                 f"{declared}.yaml" if isinstance(declared, str) else "remove `name:`",
                             reason="two profiles declaring one name would share its caches, receipts and manifests")


_BASE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*(/[A-Za-z0-9_][A-Za-z0-9_-]*)*$")


def _extends(value: Any, path: Path) -> list[str]:
    """`extends`: a name or a list of names of files in profiles/ (e.g. bases/gb10), never a path out of it."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list):
        raise ApplianceError(f"{path}: extends={show(value)} is not a list of base names", field="extends",
                             value=show(value), fix="write extends: [bases/NAME, ...]",
                             reason="extends names files in profiles/ to merge under this one")
    for name in names:
        if not isinstance(name, str) or not _BASE_NAME.match(name) or len(name) > 200:
            raise ApplianceError(
                f"{path}: extends entry {show(name)} is not a base name", field="extends", value=show(name),
                fix="name a file in profiles/ without .yaml, e.g. bases/gb10 (no absolute path, no '..')",
                reason="a profile may only build on the bases shipped in profiles/")
    return names


def _override(data: dict[str, Any], item: str, origin: str, origins: dict[str, str]) -> None:
    check_text(origin, item)
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ApplianceError(
            f"override {show(item)} is not of the form a.b=value",
            field=origin,
            value=item,
            fix="write --set section.key=value, e.g. --set limits.max_model_len=32768",
        )
    if key in ("name", "extends"):
        raise ApplianceError(f"override {show(item)}: {key} cannot be overridden", field=key, value=show(raw))
    value = parse_scalar(raw, f"{origin} {key}") if raw.strip() else None
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
    for stale in [p for p in origins if p == key or p.startswith(f"{key}.")]:
        del origins[stale]
    _mark(value, origin, origins, key)


def load_profile(
    name_or_path: str,
    *,
    env_overrides: list[str] = (),  # type: ignore[assignment]
    cli_overrides: list[str] = (),  # type: ignore[assignment]
    cli_extra_args: list[str] = (),  # type: ignore[assignment]
    root: Path | None = None,
    active: Active | bool = True,
) -> LoadedProfile:
    """`active`: the upgrade layer (appliance/profile/active.py): True reads the profile's active channel, False
    leaves it out (the profile's own channel), an Active record applies that one."""
    root = root or profiles_dir()
    check_text("profile", name_or_path, max_bytes=4096)
    path = resolve_path(name_or_path, root)
    origins: dict[str, str] = {}
    merged: dict[str, Any] = {}
    layers = _Layers(root.resolve())
    for origin, layer in layers.of(path.resolve()):
        _merge(merged, layer, origin, origins, "")
    _check_name(layers, path)
    merged["name"] = path.stem  # a base's or an extended profile's name is never inherited
    origins["name"] = f"profile:{path.stem}"
    if active is not False:
        _upgrade_layer(merged, origins, None if active is True else active)
    for item in env_overrides:
        _override(merged, item, "env:APPLIANCE_SET", origins)
    for item in cli_overrides:
        _override(merged, item, "cli:--set", origins)
    if cli_extra_args:
        _append_passthrough(merged, list(cli_extra_args), origins)
    check_tree(merged, origins)
    _default_channel(merged, origins)
    try:
        profile = Profile.model_validate(merged)
    except ValidationError as exc:
        raise _explain(exc, merged, origins, path) from None
    return LoadedProfile(profile, path, origins)


def with_overrides(base: LoadedProfile, items: list[str], origin: str) -> LoadedProfile:
    """`base` (a resolved profile, e.g. the one launch.json holds) with more overrides on top, validated as
    `load_profile` validates, each new value with `origin`: for a program of a running serve (the canary's ladder),
    which must not load the YAML again."""
    origins = dict(base.origins)
    merged = base.profile.model_dump()
    for item in items:
        _override(merged, item, origin, origins)
    check_tree(merged, origins)
    try:
        profile = Profile.model_validate(merged)
    except ValidationError as exc:
        raise _explain(exc, merged, origins, base.source) from None
    return LoadedProfile(profile, base.source, origins)


def _upgrade_layer(merged: dict[str, Any], origins: dict[str, str], given: Active | None) -> None:
    """The channel `appliance upgrade promote` made active for this profile (appliance/profile/active.py), or the
    record `given`: after the profile, before APPLIANCE_SET and --set, with its origin."""
    from appliance.profile.active import ActiveError, read_active

    name = merged.get("name")
    if not isinstance(name, str):
        return
    try:
        active = given or read_active(name)
    except ActiveError as exc:
        raise ApplianceError(f"the active channel of profile {show(name)} cannot be read: {exc}",
                             field="engine.channel", value=name,
                             fix="`appliance upgrade status` shows it; `appliance upgrade rollback` or removing the "
                                 "file returns the profile to its own channel",
                             reason="a promoted channel is part of what the serve runs") from None
    if active is not None:
        for item, origin in active.layer():
            _override(merged, item, origin, origins)


def _append_passthrough(merged: dict[str, Any], words: list[str], origins: dict[str, str]) -> None:
    """`-- ARGS` of render/run: after the profile's own engine.extra_args (the model refuses a non-list there)."""
    engine = merged.setdefault("engine", {})
    if not isinstance(engine, dict):
        return
    given = engine.get("extra_args") or []
    engine["extra_args"] = [*given, *words] if isinstance(given, list) else given
    before = origins.get("engine.extra_args")
    origins["engine.extra_args"] = f"{before}+cli:--" if given and before else "cli:--"


def default_channel(target: str) -> tuple[str, str]:
    """The channel a profile of `target` runs when it names none, and its origin: the one place a profile's channel
    is filled (here for a loaded profile, through channels.capabilities for a Profile built directly)."""
    from appliance.lock import load_lock
    from appliance.lockfile import default_key

    return load_lock().default_for("cpu" if target == "cpu" else "gpu"), f"lock:{default_key(target)}"


def _default_channel(merged: dict[str, Any], origins: dict[str, str]) -> None:
    """engine.channel: the profile's (its bases', an override's), else the lock's default for its target; an
    unknown name is refused here, naming the nearest channel, so no command ever renders for a channel that is
    not locked."""
    from appliance.lock import lock_document
    from appliance.lockfile import UnknownChannel, channel

    lock = lock_document()  # a hostile lock is the reader's exit 2, naming the version lock and what chose it
    engine = merged.get("engine")
    if engine is not None and not isinstance(engine, dict):
        return  # the model's own error names it
    engine = merged.setdefault("engine", {})
    name = engine.get("channel")
    if name is None:
        hardware = merged.get("hardware")
        target = "cpu" if isinstance(hardware, dict) and hardware.get("gpu") == "cpu" else "gpu"
        engine["channel"], origins["engine.channel"] = default_channel(target)
        return
    if not isinstance(name, str):
        return
    try:
        channel(lock, name)
    except UnknownChannel as exc:
        raise ApplianceError(f"engine.channel={show(name)} ({origins.get('engine.channel', 'profile')}): {exc}",
                             field="engine.channel", value=show(name),
                             fix="name a channel of versions.json (appliance channels lists them)",
                             reason="a channel is a complete lock of one engine line; the rules, the rendered "
                                    "flags and the log expectations follow it") from None


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc[:-1]:
        info = getattr(current, "model_fields", {}).get(part)
        if info is None:
            return []
        ann = info.annotation
        args = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = args[0] if args else ann
    return list(getattr(current, "model_fields", {}))


def _explain(exc: ValidationError, merged: dict[str, Any], origins: dict[str, str], path: Path) -> ApplianceError:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc)
        origin = origins.get(dotted, "profile" if err["type"] != "missing" else "missing")
        if err["type"] == "extra_forbidden":
            known = _known_fields(Profile, loc)
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            lines.append(f"{dotted}: unknown key ({origin}); {hint}known: {', '.join(known)}")
        elif err["type"] == "missing":
            lines.append(f"{dotted}: required, not set by the profile or its bases")
        else:
            lines.append(f"{dotted}={show(err.get('input'))} ({origin}): {err['msg']}")
    return ApplianceError(
        f"profile {path.stem}: {len(lines)} invalid field(s)\n    " + "\n    ".join(lines),
        field=lines[0].split(":")[0] if lines else None,
        fix="correct the fields named above (`appliance profiles show NAME` shows a shipped profile; "
            "`appliance profiles path` names their folder)",
    )
