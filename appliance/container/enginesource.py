"""The engine's source checked out by commit, not by tag, and the record of what was built (issue 20, item 1).

Standard library only: the GPU build runs this file by path, like lockcli.py, before anything is installed.

    enginesource.py --versions versions.json [--channel C] fetch --dest DIR --platform linux/arm64 --write FILE \
        [--url URL]

A tag is a name that can move (the fork's 20260809 tag was read as aa0d513027 by one peer and as d44e224ab9
by jasl/vllm-ds4-sm120-harness, whose acceptance script expects that head), so the build never trusts it:
it fetches the pull request's branch
(the channel's engine.branch in versions.json) with its whole history but without file contents (`--filter=blob:none`:
commits and trees only, a few hundred MB at most, so the pin is found however far back it is), resolves the
pinned commit there (a short pin must be unambiguous), checks it out, and writes engine-source.json: the full
40-hex SHA, the branch and its head, the tag and where it points now (or null). A pin that is not on the
branch is fetched by its full SHA when versions.json has one (servers hand out reachable commits by id).
The branch was force-pushed once, so before giving up the pin is looked for in every public ref (issue 33, item 4):
the branch, the tag, the full SHA by id, the upstream pull request's head ref (`pull/41834/head` on
vllm-project/vllm, whose head branch this is) and, last, every branch and tag of the fork back to a year before the
branch head (`--shallow-since`: the cheap way to reach a commit that only another ref still holds). When it cannot be
found at all the build stops, naming each ref tried and where it points.
The URL (ENGINE_GIT_URL, a mirror) is never written into the record: it may carry a credential.

The wheel's version is set on purpose (issue 33, item 3). Left to setuptools-scm, a fetch that knows only the fork's
date tag makes the wheel `20260809`, which vLLM reports as its version and `_prev_minor_version_was` asserts on. So
the fork's tag is kept out of refs/tags (setuptools-scm's `git describe` never sees it), the remote's release tags
(`v1.2.3`) are fetched, and the version is what setuptools-scm's default scheme derives from the nearest one:
`v0.27.0` plus 429 commits is `0.27.1.dev429+gd44e224ab9` (no release tag at all: versions.json's engine.base.version
as `<base>.dev0+g<commit>`). It is written to the record; `version` prints it for VLLM_VERSION_OVERRIDE (vLLM's
setup.py hands that to setuptools-scm as SETUPTOOLS_SCM_PRETEND_VERSION, so the build's own edits of the tree do not
add a `.dYYYYMMDD` either) and `check-wheel` proves the built wheel carries it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run by path (the image build): the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.container.lockcli import add_lock_args, lock_channel
from appliance.errors import ApplianceError
from appliance.lockfile import ENGINE_RECORD_KEYS as RECORD_KEYS  # noqa: F401  (the record's keys, re-exported)
from appliance.lockfile import FULL_SHA, UnknownChannel, engine_record_problems

PIN = re.compile(r"^[0-9a-f]{10,40}$")
"""versions.json's commit: the full SHA, or a prefix of at least 10 hex digits (what the seed quotes)."""
RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
"""An upstream release tag, the only kind the version is derived from (rc and dev tags are left out)."""
BASE_VERSION = re.compile(r"^\d+(\.\d+)*$")
SHALLOW_SINCE_DAYS = 365
"""How far back before the branch head the last attempt reads the fork's other refs."""
UPSTREAM_PULLS: dict[tuple[str, str], tuple[str, int]] = {
    ("jasl/vllm", "codex/ds4-sm120-min-enable"): ("vllm-project/vllm", 41834)}
"""(fork, branch) -> (upstream repository, pull request) whose head ref holds the same commits: versions.json's
engine.confirmed.branch (vllm-project/vllm#41834, 'jasl force-pushed the codex/ds4-sm120-min-enable branch')."""
FORK_TAGS = "refs/appliance/tags"
"""Where the fork's own tag is kept: out of refs/tags, so that setuptools-scm never derives a version from it."""


class SourceError(Exception):
    """The engine's source could not be fetched or pinned; the message names what and the fix."""


@dataclass(frozen=True)
class PullRequest:
    """An upstream pull request whose head ref may hold the pin after the fork's branch moved."""

    repo: str
    number: int
    url: str

    @property
    def ref(self) -> str:
        return f"refs/pull/{self.number}/head"


@dataclass(frozen=True)
class EngineRecord:
    """engine-source.json: what the image's vLLM was built from."""

    repo: str
    branch: str
    branch_head: str
    ref: str
    tag_head: str | None
    """Where the tag points now (None: the remote has no such tag any more)."""
    pinned: str
    """versions.json's commit, as written there (possibly a prefix)."""
    commit: str
    """The full SHA that was checked out and built."""
    on_branch: bool
    platform: str
    torch_cuda_arch_list: str
    version: str
    """The wheel's version: VLLM_VERSION_OVERRIDE (`version`), checked after the build (`check-wheel`)."""
    version_source: str
    """Where `version` came from: the release tag and the distance, or versions.json's engine.base.version."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def pin_problem(pin: object) -> str | None:
    """Why the channel's engine.commit cannot be used as a pin (None when it can)."""
    if not isinstance(pin, str) or not PIN.match(pin):
        return (f"engine.commit={pin!r} is not a commit id: write the full 40-hex SHA (or at least its first "
                f"10 hex digits, lower case)")
    return None


def _git(repo: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["git", "-C", str(repo), "-c", "advice.detachedHead=false", *argv]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceError(f"git {argv[0]} did not run: {exc}") from None
    if check and out.returncode != 0:
        raise SourceError(f"git {' '.join(argv[:3])} failed: {out.stderr.strip() or out.stdout.strip()}")
    return out


def _resolve(repo: Path, rev: str) -> tuple[str | None, str]:
    """(full SHA or None, git's complaint when it is None)."""
    out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
    if out.returncode == 0:
        return out.stdout.strip(), ""
    return None, out.stderr.strip()


def engine_version(repo: Path, commit: str, base: str | None) -> tuple[str, str]:
    """(the wheel's version, where it came from): setuptools-scm's default scheme on the nearest release tag, which
    bumps the last number and counts the commits since (v0.27.0 + 429 -> 0.27.1.dev429+g<commit[:10]>); on the tag
    itself, the tag. No release tag among the commit's ancestors: `<base>.dev0+g<commit[:10]>`."""
    out = _git(repo, "describe", "--tags", "--long", "--abbrev=10", "--match", "v[0-9]*", "--exclude", "v*[!0-9.]*",
               commit, check=False)
    tag, distance = None, 0
    if out.returncode == 0:
        tag, count, _ = out.stdout.strip().rsplit("-", 2)
        distance = int(count)
    release = RELEASE_TAG.match(tag) if tag else None
    if release:
        major, minor, patch = (int(n) for n in release.groups())
        if distance == 0:
            return f"{major}.{minor}.{patch}", f"release tag {tag} (the commit itself)"
        return (f"{major}.{minor}.{patch + 1}.dev{distance}+g{commit[:10]}",
                f"release tag {tag}, {distance} commits before it")
    if not isinstance(base, str) or not BASE_VERSION.match(base):
        raise SourceError(f"no release tag v*.*.* is an ancestor of {commit} and the channel's engine.base.version "
                          f"is {base!r}, not a release number: the wheel would get a version from the fork's date "
                          f"tag. Fix: set engine.base.version in versions.json to the release the fork is based on "
                          f"(e.g. 0.27.1), or mirror the upstream v* tags into ENGINE_GIT_URL")
    return f"{base}.dev0+g{commit[:10]}", f"versions.json engine.base.version {base} (no release tag v*.*.* reachable)"


def wheel_version(wheel: Path) -> str:
    """The Version: line of the wheel's METADATA."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise SourceError(f"{wheel.name}: {len(names)} *.dist-info/METADATA files, not one")
            text = zf.read(names[0]).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise SourceError(f"{wheel}: cannot be read as a wheel: {exc}") from None
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line:
            break
    raise SourceError(f"{wheel.name}: its METADATA has no Version: line")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no answer"


def _is_shallow(dest: Path) -> bool:
    return _git(dest, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def _unshallow(dest: Path, repo: str, pin: str, specs: tuple[str, ...]) -> None:
    """The full history again after a --shallow-since fetch found the pin: the wheel's version counts the commits
    from the nearest release tag (engine_version), and a cut history counts them wrong without a word."""
    if not _is_shallow(dest):  # every commit was newer than the cut: nothing is missing (and --unshallow refuses)
        return
    out = _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", "--unshallow", "origin", *specs,
               check=False)
    if out.returncode != 0 or _is_shallow(dest):
        raise SourceError(f"{repo}: the pinned commit {pin} was found on another ref of the fork, but its full "
                          f"history could not be fetched ({_first_line(out.stderr or out.stdout)}): the wheel's "
                          f"version counts commits from the nearest release tag, which a cut history miscounts. "
                          f"Fix: use a mirror that serves the whole history (ENGINE_GIT_URL), or pin a commit of "
                          f"the channel's branch (versions.json engine.commit)")


def fetch(url: str, dest: Path, *, repo: str, branch: str, ref: str, pin: str, platform: str, arch: str,
          base: str | None = None, pull: PullRequest | None = None) -> EngineRecord:
    """Fetch `branch` (and the tag `ref`) of `url` into `dest`, check out `pin`, return the record."""
    problem = pin_problem(pin)
    if problem:
        raise SourceError(problem)
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / ".git").exists():
        _git(dest, "init", "--quiet")
        _git(dest, "remote", "add", "origin", url)
    remote_branch = f"refs/remotes/origin/{branch}"
    out = _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", "origin",
               f"+refs/heads/{branch}:{remote_branch}", check=False)
    if out.returncode != 0:
        raise SourceError(f"{repo}: cannot fetch branch {branch!r}: {out.stderr.strip()}. Fix: check the "
                          f"channel's engine.branch in versions.json and ENGINE_GIT_URL (a mirror must carry it)")
    branch_head, _ = _resolve(dest, remote_branch)
    assert branch_head is not None  # just fetched
    # The tag is only reported: a moved or deleted tag changes nothing about what is built.
    tag = _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", "origin",
               f"+refs/tags/{ref}:{FORK_TAGS}/{ref}", check=False)
    tag_head = _resolve(dest, f"{FORK_TAGS}/{ref}")[0] if tag.returncode == 0 else None
    # The release tags the version is derived from (none on the remote is no error: engine_version falls back).
    _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", "origin", "+refs/tags/v*:refs/tags/v*",
         check=False)
    commit, complaint = _resolve(dest, pin)
    tried = [f"branch {branch} (at {branch_head})", f"tag {ref} (at {tag_head or 'no such tag'})"]

    def missing() -> bool:
        return commit is None and "ambiguous" not in complaint

    if missing() and FULL_SHA.match(pin):
        out = _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", "origin", pin, check=False)
        commit, complaint = _resolve(dest, pin)
        tried.append(f"{pin} by id ({'fetched' if out.returncode == 0 else _first_line(out.stderr)})")
    if missing() and pull is not None:
        local = f"refs/appliance/pull/{pull.number}"
        out = _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", pull.url, f"+{pull.ref}:{local}",
                   check=False)
        at = _resolve(dest, local)[0] if out.returncode == 0 else None
        commit, complaint = _resolve(dest, pin)
        tried.append(f"{pull.repo} pull/{pull.number}/head (at {at or 'not fetched: ' + _first_line(out.stderr)})")
    if missing():
        stamp = int(_git(dest, "log", "-1", "--format=%ct", branch_head).stdout.strip())
        since = time.strftime("%Y-%m-%d", time.gmtime(stamp - SHALLOW_SINCE_DAYS * 86400))
        specs = ("+refs/heads/*:refs/appliance/fork/heads/*", "+refs/tags/*:refs/appliance/fork/tags/*")
        out = _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", f"--shallow-since={since}", "origin",
                   *specs, check=False)
        commit, complaint = _resolve(dest, pin)
        if commit is not None:
            _unshallow(dest, repo, pin, specs)
        tried.append(f"every branch and tag of {repo} since {since} "
                     f"({'fetched' if out.returncode == 0 else 'not fetched: ' + _first_line(out.stderr)})")
    if commit is None:
        why = "it is ambiguous there" if "ambiguous" in complaint else "it is not in its history"
        raise SourceError(
            f"{repo}: the pinned commit {pin} (the channel's engine.commit in versions.json) cannot be found: {why}. "
            f"Tried: {'; '.join(tried)}. Fix: pin the full 40-hex SHA of the locked commit in versions.json "
            f"(the build fetches it by id), or move the lock to a commit of that branch and re-validate (K16)")
    on_branch = _git(dest, "merge-base", "--is-ancestor", commit, remote_branch, check=False).returncode == 0
    _git(dest, "checkout", "--quiet", "--detach", commit)
    head, _ = _resolve(dest, "HEAD")
    if head != commit:
        raise SourceError(f"{repo}: checked out {commit} but HEAD is {head}")
    version, version_source = engine_version(dest, commit, base)
    return EngineRecord(repo, branch, branch_head, ref, tag_head, pin, commit, on_branch, platform, arch, version,
                        version_source)


def recorded_version(record_path: Path) -> str:
    """engine-source.json's version, for VLLM_VERSION_OVERRIDE."""
    try:
        version = json.loads(record_path.read_text()).get("version")
    except (OSError, ValueError, AttributeError) as exc:
        raise SourceError(f"{record_path}: no readable engine record: {exc}") from None
    if not isinstance(version, str) or not version:
        raise SourceError(f"{record_path} has no version: write it with `enginesource.py fetch` first")
    return version


def wheel_problem(record_path: Path, wheel: Path) -> str | None:
    """Why the built wheel does not carry the version the record set (None when it does)."""
    wanted, built = recorded_version(record_path), wheel_version(wheel)
    if built != wanted:
        return (f"{wheel.name} is version {built}, not {wanted} ({record_path.name}): VLLM_VERSION_OVERRIDE did not "
                f"reach vLLM's setup.py. Fix: pass VLLM_VERSION_OVERRIDE=\"$(enginesource.py version ...)\" to the "
                f"wheel build (vLLM reports this version, and _prev_minor_version_was parses it)")
    return None


def record_problems(record: dict[str, object], engine_source: dict[str, object]) -> list[str]:
    """What an image's engine-source.json says against versions.json (lockfile.engine_record_problems)."""
    return engine_record_problems(record, engine_source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="enginesource.py", description=__doc__.splitlines()[0])
    add_lock_args(parser, "the fork's channel (default: $APPLIANCE_CHANNEL, else the lock's default_channel)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fetch", help="fetch the branch, check out the pinned commit, write engine-source.json")
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--platform", required=True, help="the target platform (linux/amd64, linux/arm64)")
    p.add_argument("--write", type=Path, required=True, help="engine-source.json to write")
    p.add_argument("--url", default="", help="a mirror of the fork (default: its GitHub repository)")
    p.add_argument("--pull-url", default="", help="a mirror of the upstream repository whose pull request's head "
                   "ref is tried when the pin is not on the branch (default: its GitHub repository)")
    v = sub.add_parser("version", help="print engine-source.json's version (for VLLM_VERSION_OVERRIDE)")
    v.add_argument("--record", type=Path, required=True)
    w = sub.add_parser("check-wheel", help="the built wheel must carry engine-source.json's version")
    w.add_argument("--record", type=Path, required=True)
    w.add_argument("--wheel", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.cmd in ("version", "check-wheel"):
        try:
            if args.cmd == "version":
                print(recorded_version(args.record))
                return 0
            problem = wheel_problem(args.record, args.wheel)
        except SourceError as exc:
            print(f"enginesource: {exc}", file=sys.stderr)
            return 1
        if problem:
            print(f"enginesource: {problem}", file=sys.stderr)
            return 1
        print(f"enginesource: {args.wheel.name} carries version {recorded_version(args.record)}")
        return 0
    try:
        _, _, name, ch = lock_channel(args)
    except (ApplianceError, UnknownChannel) as exc:
        print(f"enginesource: {exc}", file=sys.stderr)
        return 2
    if ch["engine"]["source"] != "fork" or not ch["engine"].get("branch"):
        print(f"enginesource: channel {name!r} of versions.json is no fork with an engine.branch: nothing to fetch "
              f"by commit", file=sys.stderr)
        return 2
    src = ch["engine"]
    arch = ch.get("torch_cuda_arch_list", {}).get(args.platform)
    if not arch:
        print(f"enginesource: channel {name} torch_cuda_arch_list has no {args.platform}", file=sys.stderr)
        return 1
    url = args.url or f"https://github.com/{src['repo']}.git"
    upstream = UPSTREAM_PULLS.get((src["repo"], src["branch"]))
    pull = None if upstream is None else PullRequest(
        upstream[0], upstream[1], args.pull_url or f"https://github.com/{upstream[0]}.git")
    try:
        record = fetch(url, args.dest, repo=src["repo"], branch=src["branch"], ref=src["ref"], pin=src["commit"],
                       platform=args.platform, arch=arch, base=(src.get("base") or {}).get("version"), pull=pull)
    except SourceError as exc:
        print(f"enginesource: {exc}", file=sys.stderr)
        return 1
    args.write.parent.mkdir(parents=True, exist_ok=True)
    args.write.write_text(record.to_json())
    moved = "" if record.tag_head == record.commit else \
        f"; note: tag {record.ref} is at {record.tag_head or '(no such tag)'}, not the pin (it moved: the pin wins)"
    print(f"enginesource: {record.repo}@{record.commit} (pin {record.pinned}) on {record.branch} "
          f"(head {record.branch_head[:12]}, pin on branch: {record.on_branch}){moved}; wheel version "
          f"{record.version} from {record.version_source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
