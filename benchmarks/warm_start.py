"""Warm start: cold (empty compile caches) vs warm (the caches the cold start left, or a bundle's) time to ready on
the CPU serve with torch.compile on (not --enforce-eager), paired in one run (W5).

Each pair starts `appliance run cpu-smoke --set engine.enforce_eager=false` twice on one fresh APPLIANCE_HOME:
first with nothing cached, then again. "Ready" = the engine's /health answers 200 (time_to_ready.py's event). For
each start it reports what compiled: the files the start wrote into the keyed caches (APPLIANCE_HOME/cache/<lock
digest>-<engine digest>/<tool>; a start that compiled nothing writes nothing there) and the engine's own words about
its compile cache, read from the serve log through the log-check table (`compile_cache_*` facts).

`--from-bundle` adds a third start per pair: the cold start's caches and model carried by `appliance bundle create`
into a fresh home (`bundle apply`), started there. `--engine-default` adds the baseline: the same argv and caches
under vLLM's own default (AOT compile on), bare `vllm serve`, cold then warm, which is what recompiled.

    .venv/bin/python benchmarks/warm_start.py --pairs 1 [--from-bundle] [--engine-default] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.phase_clock import LineClock  # noqa: E402
from tests.conftest import BIN, free_port, http_ok, start_serve, wait_for  # noqa: E402  (the tests' way to serve)

COMPILE_ON = "engine.enforce_eager=false"
LOG_FACTS = ("init_engine_seconds", "compile_cache_load_failure", "compile_cache_saved", "compile_cache_loaded",
             "compile_seconds")


def _cache_folder(home: Path) -> Path:
    from appliance.profile import load_profile
    from appliance.run.caches import profile_cache_dir

    return profile_cache_dir(load_profile("cpu-smoke", cli_overrides=[COMPILE_ON]).profile, home / "cache")


def _facts(log: Path) -> dict[str, Any]:
    from appliance.health.scan import scan_file
    from appliance.health.table import load_table

    facts = scan_file(log, load_table())
    return {name: facts.get(name) for name in LOG_FACTS if facts.get(name) is not None}


def appliance_start(label: str, base: Path, model: Path, timeout: float, home: Path | None = None
                    ) -> dict[str, Any]:
    """One `appliance run` with compile on; APPLIANCE_HOME = base/home unless `home` (a bundle's target)."""
    from appliance.run.caches import inventory, written

    home = home or base / "home"
    caches = _cache_folder(home)
    before = inventory(caches)
    env = {"APPLIANCE_HOME": str(home)}
    run_dir = base / f"run-{label}"
    cpu = cpu_children()
    started = time.monotonic()
    serve = start_serve(run_dir, model, COMPILE_ON, env=env)
    try:
        with LineClock(run_dir / "vllm.log", started, launch=run_dir / "launch.json") as clock:
            if not wait_for(lambda: serve.proc.poll() is not None or http_ok(f"{serve.url}/health"),
                            timeout=timeout, interval=0.5) or serve.proc.poll() is not None:
                raise RuntimeError(f"{label}: not ready in {timeout:g} s:\n{serve.output.read_text()[-3000:]}")
            ready = time.monotonic() - started
    finally:
        serve.stop()
    time.sleep(2)
    return {"start": label, "ready_s": round(ready, 1), "cpu_s": round(cpu_children() - cpu, 1),
            "phases": clock.phases(ready), "load": os.getloadavg()[0], "wrote": written(before, inventory(caches)),
            **_facts(serve.run_dir / "vllm.log")}


def cpu_children() -> float:
    """CPU seconds (user + system) of this process's waited-for descendants: a start's processes, once stopped
    (a worker its engine core left to init when killed is not counted: a floor, not the whole)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def engine_default_start(label: str, base: Path, model: Path, timeout: float) -> dict[str, Any]:
    """Bare `vllm serve` with the appliance's argv and keyed caches, under vLLM's default AOT compile (the
    behaviour before W5's fix)."""
    from appliance.run.caches import cache_dir, cache_env, inventory, written

    plan = json.loads(subprocess.run([str(BIN / "appliance"), "render", "cpu-smoke", "--set", COMPILE_ON,
                                      "--format", "json"], capture_output=True, text=True, check=True,
                                     env={**os.environ, "APPLIANCE_MODEL_DIR": str(model)}).stdout)
    root = base / "engine-default-cache"
    env = {**os.environ, **plan["env"], **cache_env("engine", "default", root), "VLLM_USE_AOT_COMPILE": "1",
           "HF_HUB_OFFLINE": "1"}
    caches = cache_dir("engine", "default", root)
    port = free_port()
    log = base / f"{label}.log"
    before = inventory(caches)
    cpu = cpu_children()
    started = time.monotonic()
    proc = subprocess.Popen([str(BIN / "vllm"), *plan["argv"][1:], "--port", str(port)], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with LineClock(log, started) as clock:
            if not wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/health"), timeout=timeout, interval=0.5):
                raise RuntimeError(f"{label}: not ready in {timeout:g} s:\n{log.read_text()[-3000:]}")
            ready = time.monotonic() - started
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    time.sleep(2)
    return {"start": label, "ready_s": round(ready, 1), "cpu_s": round(cpu_children() - cpu, 1),
            "phases": clock.phases(ready), "load": os.getloadavg()[0], "wrote": written(before, inventory(caches)),
            **_facts(log)}


def bundle_start(base: Path, model: Path, timeout: float) -> dict[str, Any]:
    """The cold start's caches and model carried by a bundle into a fresh home, then started there."""
    bundle, target = base / "bundle", base / "applied"
    env = {**os.environ, "APPLIANCE_HOME": str(base / "home"), "APPLIANCE_MODEL_DIR": str(model)}
    subprocess.run([str(BIN / "appliance"), "bundle", "create", "cpu-smoke", "--set", COMPILE_ON, "--out",
                    str(bundle), "--no-image", "--no-wheelhouse"], env=env, check=True)
    subprocess.run([str(BIN / "appliance"), "bundle", "apply", str(bundle), "--no-image"], check=True,
                   env={**os.environ, "APPLIANCE_HOME": str(target / "home"), "HF_HOME": str(target / "hf")})
    from appliance.run.model_location import prepared_model_dir

    os.environ["APPLIANCE_HOME"] = str(target / "home")  # where the applied model is prepared
    try:
        applied_model = prepared_model_dir("HuggingFaceTB/SmolLM2-135M-Instruct")
    finally:
        os.environ.pop("APPLIANCE_HOME")
    return appliance_start("from-bundle", base, applied_model, timeout, home=target / "home")


def show(row: dict[str, Any]) -> str:
    wrote = ", ".join(f"{sub} {n} files/{size / 1e6:.1f} MB" for sub, (n, size) in sorted(row["wrote"].items()))
    said = []
    if "compile_cache_load_failure" in row:
        said.append(f"cache load FAILED ({row['compile_cache_load_failure']})")
    if "compile_cache_loaded" in row:
        said.append("AOT artefact loaded")
    if "compile_cache_saved" in row:
        said.append("AOT artefact saved")
    init = row.get("init_engine_seconds")
    phases = "\n".join(f"    {seconds:6.1f} s  {phase}" for phase, seconds in row["phases"])
    return (f"{row['start']:<22} ready {row['ready_s']:6.1f} s  CPU {row['cpu_s']:6.1f} s  load {row['load']:.1f}"
            f"  init engine {init if init is not None else '?':>7} s"
            f"  wrote: {wrote or 'nothing'}{'  [' + '; '.join(said) + ']' if said else ''}\n{phases}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--from-bundle", action="store_true", help="also start from a bundle of the cold start's caches")
    ap.add_argument("--engine-default", action="store_true", help="also run vLLM's default (AOT on) cold and warm")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    model = prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        for pair in range(args.pairs):
            base = Path(tmp) / f"pair{pair}"
            base.mkdir()
            for label in ("cold", "warm"):
                rows.append(appliance_start(label, base, model, args.timeout) | {"pair": pair})
                print(show(rows[-1]), flush=True)
            if args.from_bundle:
                rows.append(bundle_start(base, model, args.timeout) | {"pair": pair})
                print(show(rows[-1]), flush=True)
            if args.engine_default:
                for label in ("engine-default-cold", "engine-default-warm"):
                    rows.append(engine_default_start(label, base, model, args.timeout) | {"pair": pair})
                    print(show(rows[-1]), flush=True)
    cold = [r["ready_s"] for r in rows if r["start"] == "cold"]
    warm = [r["ready_s"] for r in rows if r["start"] == "warm"]
    ratios = [w / c for c, w in zip(cold, warm, strict=True)]
    print(f"\ncold {', '.join(f'{c:.1f}' for c in cold)} s; warm {', '.join(f'{w:.1f}' for w in warm)} s; "
          f"warm/cold {', '.join(f'{r:.2f}' for r in ratios)}")
    recompiled = [r["start"] for r in rows if r["start"] != "cold" and not r["start"].endswith("-cold")
                  and (r["wrote"].get("inductor") or "compile_cache_load_failure" in r)]
    print("warm starts that compiled: " + (", ".join(recompiled) or "none"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
