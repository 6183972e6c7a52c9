"""The GPU image's build-time smoke test: the JIT toolchain compiles for the image's SM, and the kernel libraries
load together (issue 20, item 9). No GPU is needed for either, so a broken image stops at build time.

Standard library only: the GPU build runs this file by path with the image's Python.

    smoke.py --arch sm_121a [--nvcc nvcc] [--python PY] [--modules flashinfer,tilelang,tvm_ffi,cutlass]

1. nvcc compiles a trivial kernel to a cubin for the target SM (`-arch=sm_121a -cubin`): what FlashInfer,
   TileLang and the CuTe DSL do at run time. A toolchain that cannot target the SM (too old a CUDA, a missing
   header or cicc) fails here, not mid-serve.
2. One fresh interpreter imports flashinfer, tilelang, tvm_ffi and cutlass, in that order, in one process. A
   tvm-ffi that tilelang was not built against aborts there with a double registration of its global functions
   (K14) — a SIGABRT that no `pip check` sees. The abort is named with its signal.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

KERNEL = "__global__ void appliance_smoke(int *out) { out[threadIdx.x] = threadIdx.x; }\n"
MODULES = ("flashinfer", "tilelang", "tvm_ffi", "cutlass")
ELF = b"\x7fELF"


def compile_problem(nvcc: str, arch: str) -> str | None:
    """None when nvcc made an ELF cubin for `arch`, else why not."""
    with tempfile.TemporaryDirectory(prefix="appliance-smoke-") as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        src.write_text(KERNEL)
        try:
            run = subprocess.run([nvcc, f"-arch={arch}", "-cubin", "-o", str(out), str(src)], capture_output=True,
                                 text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{nvcc} did not run: {exc}"
        if run.returncode != 0:
            return f"{nvcc} -arch={arch} failed (exit {run.returncode}): {(run.stderr or run.stdout).strip()[-600:]}"
        if not out.is_file() or out.read_bytes()[:4] != ELF:
            return f"{nvcc} -arch={arch} exited 0 but wrote no cubin"
    return None


def import_problem(python: str, modules: tuple[str, ...]) -> str | None:
    """None when one interpreter imports every module in order, else what failed (an abort by its signal)."""
    code = "; ".join(f"import {m}" for m in modules)
    try:
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} did not run: {exc}"
    if run.returncode == 0:
        return None
    tail = (run.stderr or run.stdout).strip()[-800:]
    if run.returncode < 0:
        name = signal.Signals(-run.returncode).name
        hint = (" — the tvm-ffi/tilelang double-registration abort (K14: apache-tvm-ffi must be the version "
                "tilelang was built against; versions.json holds it)") if name == "SIGABRT" else ""
        return f"importing {', '.join(modules)} in one process was killed by {name}{hint}: {tail}"
    return f"importing {', '.join(modules)} in one process failed (exit {run.returncode}): {tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="smoke.py", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, help="the CUDA SM to compile for, e.g. sm_121a (CUTE_DSL_ARCH)")
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--modules", default=",".join(MODULES))
    args = parser.parse_args(argv)
    problems = [p for p in (compile_problem(args.nvcc, args.arch),
                            import_problem(args.python, tuple(m for m in args.modules.split(",") if m))) if p]
    for line in problems:
        print(f"smoke: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"smoke: nvcc compiles for {args.arch}; {args.modules.replace(',', ', ')} import together")
    return 0


if __name__ == "__main__":
    sys.exit(main())
