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
branch is fetched by its full SHA when versions.json has one (servers hand out reachable commits by id);
when it cannot be found at all the build stops, naming the pin, the branch head and the tag's head.
The URL (ENGINE_GIT_URL, a mirror) is never written into the record: it may carry a credential.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
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


class SourceError(Exception):
    """The engine's source could not be fetched or pinned; the message names what and the fix."""


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


def fetch(url: str, dest: Path, *, repo: str, branch: str, ref: str, pin: str, platform: str, arch: str,
          ) -> EngineRecord:
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
               f"+refs/tags/{ref}:refs/tags/{ref}", check=False)
    tag_head = _resolve(dest, f"refs/tags/{ref}")[0] if tag.returncode == 0 else None
    commit, complaint = _resolve(dest, pin)
    if commit is None and FULL_SHA.match(pin):
        _git(dest, "fetch", "--quiet", "--filter=blob:none", "--no-tags", "origin", pin, check=False)
        commit, complaint = _resolve(dest, pin)
    if commit is None:
        why = "it is ambiguous there" if "ambiguous" in complaint else "it is not in its history"
        raise SourceError(
            f"{repo}: the pinned commit {pin} (the channel's engine.commit in versions.json) cannot be found: {why}. "
            f"Branch {branch} is at {branch_head}; tag {ref} is at {tag_head or '(no such tag)'}. Fix: pin the "
            f"full 40-hex SHA of the validated commit in versions.json (the build fetches it by id), or move the "
            f"lock to a commit of that branch and re-validate (K16)")
    on_branch = _git(dest, "merge-base", "--is-ancestor", commit, remote_branch, check=False).returncode == 0
    _git(dest, "checkout", "--quiet", "--detach", commit)
    head, _ = _resolve(dest, "HEAD")
    if head != commit:
        raise SourceError(f"{repo}: checked out {commit} but HEAD is {head}")
    return EngineRecord(repo, branch, branch_head, ref, tag_head, pin, commit, on_branch, platform, arch)


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
    args = parser.parse_args(argv)

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
    try:
        record = fetch(url, args.dest, repo=src["repo"], branch=src["branch"], ref=src["ref"], pin=src["commit"],
                       platform=args.platform, arch=arch)
    except SourceError as exc:
        print(f"enginesource: {exc}", file=sys.stderr)
        return 1
    args.write.parent.mkdir(parents=True, exist_ok=True)
    args.write.write_text(record.to_json())
    moved = "" if record.tag_head == record.commit else \
        f"; note: tag {record.ref} is at {record.tag_head or '(no such tag)'}, not the pin (it moved: the pin wins)"
    print(f"enginesource: {record.repo}@{record.commit} (pin {record.pinned}) on {record.branch} "
          f"(head {record.branch_head[:12]}, pin on branch: {record.on_branch}){moved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
