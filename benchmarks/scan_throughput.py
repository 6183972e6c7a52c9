"""Log-scan throughput: the appliance's scanner vs `grep -E` with the same patterns, same run.

The log is ≥ 1 GiB made of REAL lines: the fixture serve logs (the CPU smoke serve's own output
and the DeepSeek excerpts) concatenated and repeated. Both sides read the same file from the page
cache; grep runs with LC_ALL=C (its fastest mode, the strict baseline; under C.UTF-8 the same patterns ran at
0.6-1.4 MiB/s here, so a 1 GiB log took half an hour and said nothing of the scanner). Repetitions alternate which
side goes first. Each scan is its own process, so its max RSS is measured alone (os.wait4): 100 MiB and 1 GiB
must need the same memory.

    .venv/bin/python benchmarks/scan_throughput.py [--size-gib 1] [--reps 3] [--engine auto|hyperscan|re]

Two mixes: `serving` (each engine run prints one real start-up, then the real lines of a serve at
work, restarting every 64 MiB: what a 1 GiB serve log looks like) and `dense` (every fixture log
whole, over and over: a quarter of all lines are evidence, the scanner's worst case).
Target (issue 38, P2): scanner throughput ≥ 1.0 × grep's on BOTH mixes, with results equal to the reference reader's
on the log's first 64 MiB (`--check-mib`; it is ~50x slower), and RSS independent of the log size. `--engine re`
measures the pure-Python fallback (prefilter.py) for information; the target is the default engine's.
Each scan is a process of its own that reads the compiled scan table (health/compiled.py), as a
scan without a judge does; the 100 MiB run first compiles it (~0.2 s, the table's models validated), once.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "logs"
MIB = 1 << 20
TARGET = 1.0
# Prints the counts and a digest of everything the scan tells (facts with their lines, fatal and shutdown hits with
# line, count and text, runs: tests/test_health_scan_engines.summary's fields), so a run is compared with the
# reference reader's on the same file.
SCAN = ("import sys, json, hashlib; from pathlib import Path; from appliance.health.scan import scan_file; "
        "f = scan_file(Path(sys.argv[1]), engine=sys.argv[2]); "
        "hits = lambda found: {k: (h.line, h.count, h.text) for k, h in found.items()}; "
        "told = [f.values, f.lines, hits(f.fatal), hits(f.quiet), f.runs, f.run_started_line, f.lines_read]; "
        "print(f.lines_read, f.runs, len(f.fatal), "
        "hashlib.sha256(json.dumps(told, sort_keys=True, default=str).encode()).hexdigest()[:16])")
ENGINE = ("import sys; from appliance.health.prefilter import resolve_engine, hyperscan_problem; "
          "print(resolve_engine(sys.argv[1]), hyperscan_problem() or '')")


def _fixtures() -> list[list[bytes]]:
    return [p.read_bytes().splitlines(keepends=True) for p in sorted(LOGS.rglob("*.log"))]


def _serving(lines: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """(start-up lines up to `Application startup complete.`, the lines printed while serving)."""
    ready = next((i for i, line in enumerate(lines) if b"Application startup complete" in line), None)
    if ready is None:
        return [], []
    serving = []
    for line in lines[ready + 1:]:
        if any(mark in line for mark in (b"[shutdown]", b"ERROR", b"Traceback", b"Shutting down")):
            break
        serving.append(line)
    return lines[: ready + 1], serving


def build_log(path: Path, size: int, mix: str) -> int:
    """dense: every fixture log whole, over and over (a quarter of the lines are evidence: the worst case).
    serving: a long serve — each engine run prints one real start-up, then the real lines a serve prints
    while it works (access log, engine stats, DSpark metrics) until the next restart every 64 MiB."""
    logs = _fixtures()
    with path.open("wb") as out:
        written = 0
        if mix == "dense":
            block = b"".join(line for lines in logs for line in lines)
            while written < size:
                written += out.write(block)
            return written
        runs = [(start, b"".join(serve)) for start, serve in map(_serving, logs) if start]
        serve_block = b"".join(block for _, block in runs)
        run = 0
        while written < size:
            start, _ = runs[run % len(runs)]
            run += 1
            written += out.write(b"".join(start))
            run_end = min(size, written + 64 * MIB)
            while written < run_end:
                written += out.write(serve_block)
    return written


def to_ere(regex: str) -> str:
    """Python regex -> POSIX ERE with the same line-matching meaning (named and non-capturing groups
    become plain groups, lazy quantifiers greedy, which does not change whether a line matches)."""
    ere = re.sub(r"\(\?P<\w+>", "(", regex).replace("(?:", "(")
    ere = ere.replace("*?", "*").replace("+?", "+").replace("??", "?")
    return ere.replace(r"[^\n]", ".").replace(r"\d", "[0-9]").replace(r"\s", "[[:space:]]")


def patterns() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from appliance.health.table import load_table

    table = load_table()
    return [to_ere(p.regex) for p in (*table.facts, *table.fatal)]


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(seconds, CPU seconds, max RSS in KiB, stdout) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # grep -c exits 1 when nothing matched
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err[-2000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, out.strip()


def equals_reference(big: Path, mib: int, scanner: list[str], engine: str, env: dict[str, str]) -> bool:
    """The scanner and the reference reader (every line, every pattern: ~50x slower, so it reads the log's first
    `mib` MiB, cut at a line's end; the mixes repeat their lines, so that prefix holds every shape) tell the same."""
    head = big.with_suffix(".head.log")
    # Copied a MiB at a time: a 64 MiB buffer in this process would count in every later child's max RSS (a forked
    # child's resident pages before its exec count in ru_maxrss on Linux), as it did in one run (163 MiB).
    with big.open("rb") as src, head.open("wb") as dst:
        left = mib * MIB
        while left > 0 and (piece := src.read(min(left, MIB))):
            left -= dst.write(piece)
    with head.open("rb+") as f:  # cut at the last line's end
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - MIB))
        tail = f.read()
        f.truncate(size - len(tail) + tail.rfind(b"\n") + 1)
    try:
        _, _, _, fast = run([*scanner, str(head), engine], env)
        t, _, _, reference = run([*scanner, str(head), "reference"], env)
    finally:
        head.unlink()
    same = fast == reference
    print(f"  the first {mib} MiB: scanner {fast}, reference reader {reference} ({t:.1f} s): "
          f"{'equal' if same else 'DIFFERENT'}")
    return same


def bench(mix: str, size_bytes: int, reps: int, workdir: Path, ere: list[str],
          env: dict[str, str], engine: str, check_mib: int) -> tuple[float, float, int]:
    """Returns (median throughput ratio scanner/grep, the same in CPU time, max RSS of the scanner in KiB).
    The CPU-time ratio is what the wall-clock one would be on an idle machine; on a shared one the wall
    clock also measures who else ran."""
    big = workdir / f"{mix}.log"
    size = build_log(big, size_bytes, mix)
    grep = ["grep", "-c", "-E", *[x for p in ere for x in ("-e", p)]]
    scanner = [sys.executable, "-c", SCAN]
    print(f"-- {mix}: {size / MIB:,.0f} MiB of real fixture lines, {len(ere)} patterns")
    subprocess.run(["cat", str(big)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    grep_t, scan_t, grep_cpu, scan_cpu, scan_rss = [], [], [], [], []
    scan_outs: list[str] = []
    for rep in range(reps):
        for arm in (["grep", "scan"] if rep % 2 == 0 else ["scan", "grep"]):
            if arm == "grep":
                t, cpu, _, out = run([*grep, str(big)], {**env, "LC_ALL": "C"})
                grep_t.append(t)
                grep_cpu.append(cpu)
                print(f"  rep {rep + 1} grep -E (LC_ALL=C): {t:6.2f} s {size / MIB / t:7.1f} MiB/s (CPU {cpu:5.2f} s) "
                      f"({out} lines match)")
            else:
                t, cpu, rss, out = run([*scanner, str(big), engine], env)
                scan_t.append(t)
                scan_cpu.append(cpu)
                scan_rss.append(rss)
                scan_outs.append(out)
                print(f"  rep {rep + 1} scanner:            {t:6.2f} s {size / MIB / t:7.1f} MiB/s (CPU {cpu:5.2f} s) "
                      f"max RSS {rss / 1024:.1f} MiB (lines, runs, fatal: {out})")
    same = all(o == scan_outs[0] for o in scan_outs) and equals_reference(big, check_mib, scanner, engine, env)
    g, s = statistics.median(grep_t), statistics.median(scan_t)
    cpu_ratio = statistics.median(grep_cpu) / statistics.median(scan_cpu)
    print(f"  median: grep -E {size / MIB / g:.1f} MiB/s, scanner {size / MIB / s:.1f} MiB/s -> ratio {g / s:.2f}x "
          f"(CPU time: {cpu_ratio:.2f}x)")
    big.unlink()
    return g / s if same else 0.0, cpu_ratio, max(scan_rss)  # a result unlike the reference's fails the target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mix", choices=["serving", "dense", "both"], default="both")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--engine", choices=["auto", "hyperscan", "re"], default="auto")
    parser.add_argument("--check-mib", type=int, default=64, help="how much of each log the reference reader reads")
    args = parser.parse_args()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scan-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ere = patterns()
    engine = subprocess.run([sys.executable, "-c", ENGINE, args.engine], env=env, capture_output=True, text=True,
                            check=True).stdout.strip()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"scan engine {engine}")
    small = workdir / "small.log"
    build_log(small, 100 * MIB, "serving")
    _, _, small_rss, _ = run([sys.executable, "-c", SCAN, str(small), args.engine], env)
    small.unlink()
    results = {mix: bench(mix, int(args.size_gib * 1024 * MIB), args.reps, workdir, ere, env, args.engine,
                           args.check_mib)
               for mix in (["serving", "dense"] if args.mix == "both" else [args.mix])}
    if not args.workdir:
        workdir.rmdir()
    big_rss = max(rss for _, _, rss in results.values())
    print(f"scanner max RSS: 100 MiB log {small_rss / 1024:.1f} MiB, "
          f"{args.size_gib:g} GiB logs {big_rss / 1024:.1f} MiB")
    for mix, (ratio, cpu_ratio, _) in results.items():
        print(f"ratio {mix}: {ratio:.2f}x, in CPU time {cpu_ratio:.2f}x (target >= {TARGET:.2f} on every mix)")
    flat = big_rss <= small_rss * 1.25 + 8 * 1024
    return 0 if all(ratio >= TARGET for ratio, _, _ in results.values()) and flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
