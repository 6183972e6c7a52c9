"""FlashAttention-3 left out of an SM12x-only engine build (issue 20, item 4).

Standard library only: the GPU build runs this file by path, after the engine's checkout.

    flashattn.py prepare --source DIR --arch "12.1a" --dest DIR [--url URL]
        prints the vllm-flash-attn source folder to build from (VLLM_FLASH_ATTN_SRC_DIR), or nothing when FA3
        stays (an SM90 target is in the arch list); messages go to stderr.

Why: vLLM builds vllm-flash-attn as a CMake sub-project. Its CMakeLists.txt turns FA3 on unconditionally
(`set(FA3_ENABLED ON)`, a plain variable, so no -D can override it) and then filters FA3's architectures to
Hopper's 9.0a; with no SM90 in TORCH_CUDA_ARCH_LIST that list is empty, yet the `_vllm_fa3_C` target is still
created and its ~190 Hopper instantiations compile with CMake's implicit default architecture: hours on an
arm64 builder, for an extension Blackwell never selects (nepenth's GB10 build documents the same in its patch
0025; vllm-project/flash-attention CMakeLists.txt shows the unconditional switch).

How (our own edit, not a copy of theirs): the commit's cmake/external_projects/vllm_flash_attn.cmake names the
vllm-flash-attn repository and tag it fetches. We fetch exactly that tag (with its csrc/cutlass submodule)
into DEST, switch FA3 off at its one `set(FA3_ENABLED ON)` line and define an empty `_vllm_fa3_C` target in its
place (vLLM's setup.py asks CMake to build and install that target by name), then point vLLM at DEST through
VLLM_FLASH_ATTN_SRC_DIR, the variable vllm_flash_attn.cmake reads for a local vllm-flash-attn. A layout this
edit does not recognise stops the build by name; forkcheck.py wheel then checks _vllm_fa3_C is not in the wheel.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CMAKE = "cmake/external_projects/vllm_flash_attn.cmake"
FA3_ON = re.compile(r"^([ \t]*)set\(\s*FA3_ENABLED\s+ON\s*\)[ \t]*$", re.M)
MARK = "# appliance: FA3 off, no SM90 target"


class FlashAttnError(Exception):
    """The FA3 skip could not be prepared; the message says what was expected where."""


@dataclass(frozen=True)
class Upstream:
    repository: str
    tag: str
    submodules: tuple[str, ...]


def needs_fa3(arch_list: str) -> bool:
    """FA3 is Hopper-only (9.0a): keep it when any target is SM90."""
    return any(re.fullmatch(r"9\.0[a-z]?(\+PTX)?", a) for a in re.split(r"[;\s]+", arch_list.strip()) if a)


def upstream(source: Path) -> Upstream:
    """The vllm-flash-attn repository, tag and submodules the commit's CMake fetches."""
    path = source / CMAKE
    if not path.is_file():
        raise FlashAttnError(f"{CMAKE} is missing at this commit: cannot tell which vllm-flash-attn it builds")
    text = path.read_text()
    repo = re.search(r"GIT_REPOSITORY\s+(\S+)", text)
    tag = re.search(r"GIT_TAG\s+([0-9A-Za-z._/-]+)", text)
    if not repo or not tag:
        raise FlashAttnError(f"{CMAKE} has no GIT_REPOSITORY/GIT_TAG for vllm-flash-attn: its layout changed, "
                             f"so the FA3 skip cannot find the source to edit; update flashattn.py for it")
    subs = re.search(r"GIT_SUBMODULES\s+([^\n)]+)", text)
    return Upstream(repo.group(1), tag.group(1), tuple(subs.group(1).split()) if subs else ())


def disable_fa3(cmakelists: str) -> str:
    """vllm-flash-attn's CMakeLists.txt with FA3 off and an empty `_vllm_fa3_C` target for vLLM to ask for."""
    if MARK in cmakelists:
        return cmakelists
    found = FA3_ON.findall(cmakelists)
    if len(found) != 1:
        raise FlashAttnError(f"vllm-flash-attn CMakeLists.txt has {len(found)} `set(FA3_ENABLED ON)` lines, "
                             f"expected exactly 1: its layout changed, so FA3 cannot be switched off safely")
    return FA3_ON.sub(lambda m: f"{m[1]}{MARK}\n{m[1]}set(FA3_ENABLED OFF)\n{m[1]}add_custom_target(_vllm_fa3_C)",
                      cmakelists, count=1)


def _git(*argv: str) -> None:
    out = subprocess.run(["git", *argv], capture_output=True, text=True, timeout=3600, check=False)
    if out.returncode != 0:
        raise FlashAttnError(f"git {' '.join(argv[:2])} failed: {out.stderr.strip()}")


def prepare(source: Path, arch_list: str, dest: Path, url: str = "") -> Path | None:
    """The vllm-flash-attn folder to build from, FA3 switched off; None when FA3 is wanted."""
    if needs_fa3(arch_list):
        return None
    up = upstream(source)
    if not (dest / ".git").exists():
        dest.mkdir(parents=True, exist_ok=True)
        _git("-C", str(dest), "init", "--quiet")
        _git("-C", str(dest), "remote", "add", "origin", url or up.repository)
        _git("-C", str(dest), "fetch", "--quiet", "--depth", "1", "origin", up.tag)
        _git("-C", str(dest), "-c", "advice.detachedHead=false", "checkout", "--quiet", "FETCH_HEAD")
        if up.submodules:
            _git("-C", str(dest), "submodule", "update", "--init", "--depth", "1", "--", *up.submodules)
    cmakelists = dest / "CMakeLists.txt"
    if not cmakelists.is_file():
        raise FlashAttnError(f"vllm-flash-attn at {up.tag} has no CMakeLists.txt")
    cmakelists.write_text(disable_fa3(cmakelists.read_text()))
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flashattn.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="vllm-flash-attn with FA3 off when no SM90 is targeted")
    p.add_argument("--source", type=Path, required=True, help="the engine's checkout")
    p.add_argument("--arch", required=True, help="TORCH_CUDA_ARCH_LIST of this build")
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--url", default="", help="a mirror of the vllm-flash-attn repository")
    args = parser.parse_args(argv)
    try:
        folder = prepare(args.source, args.arch, args.dest, args.url)
    except FlashAttnError as exc:
        print(f"flashattn: {exc}", file=sys.stderr)
        return 1
    if folder is None:
        print(f"flashattn: {args.arch} targets SM90: FlashAttention-3 is built", file=sys.stderr)
        return 0
    print(f"flashattn: {args.arch} has no SM90 target: FlashAttention-3 switched off in {folder} "
          f"(VLLM_FLASH_ATTN_SRC_DIR)", file=sys.stderr)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
