"""W5: a second start with torch.compile on loads the compile caches the first one left and compiles nothing.

One cold + warm pair of `appliance run cpu-smoke --set engine.enforce_eager=false` on the real CPU engine, on a
tiny random-weight Llama (tests/tinymodel.py: 2 layers, so a compile costs seconds, not SmolLM2's ~100 s). What
compiled is read from the caches themselves (the files a start writes into APPLIANCE_HOME/cache/<key>) and from
the engine's own log through the log-check table. benchmarks/warm_start.py measures the time to ready on SmolLM2.
"""

from __future__ import annotations

from pathlib import Path

from appliance.health.scan import scan_file
from appliance.health.table import load_table
from appliance.profile import load_profile
from appliance.run.caches import inventory, profile_cache_dir, written
from tests.conftest import http_ok, start_serve, wait_for
from tests.tinymodel import make_tiny_llama

COMPILE_ON = "engine.enforce_eager=false"


def start(label: str, base: Path, model: Path, caches: Path) -> tuple[dict[str, tuple[int, int]], dict[str, object]]:
    before = inventory(caches)
    serve = start_serve(base / f"run-{label}", model, COMPILE_ON, own_caches=True)  # it measures what a start writes
    try:
        wait_for(lambda: serve.proc.poll() is not None or http_ok(f"{serve.url}/health"), timeout=600, interval=1)
        assert serve.proc.poll() is None and http_ok(f"{serve.url}/health"), \
            f"{label} start never got ready:\n{serve.output.read_text()[-4000:]}"
    finally:
        serve.stop()
    facts = scan_file(serve.run_dir / "vllm.log", load_table())
    return written(before, inventory(caches)), facts.values


def test_a_second_start_loads_its_compile_caches_and_compiles_nothing(smoke_model_dir: Path, tmp_path: Path) -> None:
    model = make_tiny_llama(smoke_model_dir, tmp_path / "tiny-llama")
    profile = load_profile("cpu-smoke", cli_overrides=[COMPILE_ON]).profile
    caches = profile_cache_dir(profile, tmp_path / "home" / "cache")  # start_serve's home
    cold, cold_facts = start("cold", tmp_path, model, caches)
    assert cold.get("inductor", (0, 0))[0] > 0, f"the cold start compiled nothing into the caches: {cold}"
    warm, warm_facts = start("warm", tmp_path, model, caches)
    assert "compile_cache_load_failure" not in warm_facts, warm_facts.get("compile_cache_load_failure")
    assert "compile_cache_saved" not in warm_facts  # a warm start that saves an artefact compiled it again
    assert warm.get("inductor", (0, 0))[0] == 0, f"the warm start compiled again: {warm}"
    assert "compile_cache_load_failure" not in cold_facts
