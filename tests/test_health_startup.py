"""Start-up progress from the serve log: the phase (healthchecks/logchecks.yaml `startup:`), its time, and the
fraction and estimate where vLLM counts (weights shards, CUDA graphs; a bar still being drawn included). Logs are
the fixtures' real CPU start and DeepSeek lines built on vLLM's format strings; the clock is the test's."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.health.context import HealthContext
from appliance.health.facts import Extractor
from appliance.health.startup import Startup, StartupTracker, drawing, tqdm_seconds
from appliance.health.table import LogTable, load_table
from appliance.profile.loader import load_profile

LOGS = Path(__file__).parent / "fixtures" / "logs"
TABLE = load_table()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Start:
    """A log read the way the exporter reads it: whole lines into the extractor, the partial one peeked."""

    def __init__(self, profile: str, role: str = "single") -> None:
        self.clock = Clock()
        self.extractor = Extractor(TABLE)
        self.judge = HealthContext.load(load_profile(profile)).judge(role)  # type: ignore[arg-type]
        self.tracker = StartupTracker(TABLE.startup, self.clock)
        self.partial = ""

    def feed(self, text: str, after_s: float = 1.0) -> Startup:
        self.clock.now += after_s
        text = self.partial + text
        cut = text.rfind("\n") + 1
        if cut:
            self.extractor.feed_text(text[:cut])
        self.partial = text[cut:]
        facts = self.extractor.facts
        live = {**facts.values, **self.extractor.peek(drawing(self.partial.encode()))}
        return self.tracker.observe(facts.runs, facts.lines_read > 0, live, self.judge.log_ready(facts))


def phases_of(log: Path, profile: str, role: str = "single") -> list[str]:
    start, seen = Start(profile, role), []
    for line in log.read_text().splitlines(keepends=True):
        view = start.feed(line)
        if view.phase and (not seen or seen[-1] != view.phase):
            seen.append(view.phase)
    return seen


def test_the_real_cpu_start_goes_through_its_phases_in_order() -> None:
    assert phases_of(LOGS / "cpu-smoke-serve.log", "cpu-smoke") == [
        "engine", "weights", "compile", "warmup", "api-server", "ready"]


def test_a_deepseek_head_start_captures_graphs_and_a_worker_is_ready_at_its_kv_sizing() -> None:
    # The seed's serve names the hub id (vLLM looks it up in the HF cache: a short `download`); the appliance passes
    # the folder it found on disk, and then there is no download phase (the CPU start above).
    assert phases_of(LOGS / "deepseek" / "gb10-tp2-dspark-head.log", "gb10-tp2", "head") == [
        "engine", "download", "weights", "compile", "warmup", "graphs", "api-server", "ready"]
    worker = phases_of(LOGS / "deepseek" / "gb10-tp2-dspark-worker.log", "gb10-tp2", "worker")
    assert worker[0] == "engine" and worker[-1] == "ready" and "api-server" not in worker


HEAD = "(Worker_TP0 pid=520) INFO 08-09 09:58:44 [model_runner.py:398] "


def test_a_hub_checkpoint_is_downloaded_then_loaded_shard_by_shard_with_the_engines_estimate() -> None:
    start = Start("gb10-tp2", "head")
    start.feed("(APIServer pid=211) INFO 08-09 09:58:02 [api_utils.py:286] non-default args: {'model': 'x'}\n")
    view = start.feed(HEAD + "Starting to load model deepseek-ai/DeepSeek-V4-Flash-0731...\n", after_s=5)
    assert (view.phase, view.index, view.done) == ("download", 2, None)
    start.feed(HEAD + "Time spent downloading weights for deepseek-ai/DeepSeek-V4-Flash-0731: 1200.5 seconds\n",
               after_s=1200)
    start.feed("Loading safetensors checkpoint shards:   0% Completed | 0/48 [00:00<?, ?it/s]\n")
    view = start.feed("Loading safetensors checkpoint shards:  65% Completed | 31/48 [01:31<00:50,  2.95s/it]\n",
                      after_s=91)
    assert (view.phase, view.done, view.total, view.unit) == ("weights", 31, 48, "shards")
    assert view.fraction == pytest.approx(31 / 48) and view.eta_s == 50
    assert view.elapsed_s == pytest.approx(1297) and view.phase_elapsed_s == pytest.approx(92)
    # No new line for 20 s: the estimate ages, the count stays.
    start.clock.now += 20
    assert start.tracker.view().eta_s == 30
    line = start.tracker.view().line()
    assert line.startswith("loading 21m57s: loading the weights (weights, phase 3/8") and "31/48 shards (65%" in line
    assert "~0m30s left" in line
    assert [p for p, _ in view.history] == ["engine", "download", "weights"]


def test_the_v2_runner_names_no_model_so_the_api_servers_line_tells_a_download_from_a_load() -> None:
    v2 = "(Worker_TP0 pid=520) INFO 12-01 10:00:00 [model_runner.py:392] Loading model from scratch...\n"
    for model, phase in (("deepseek-ai/DeepSeek-V4-Flash-0731", "download"), ("/models/DeepSeek-V4-Flash", "weights")):
        start = Start("gb10-tp2", "head")
        start.feed(f"(APIServer pid=211) INFO 12-01 09:58:02 [api_utils.py:286] non-default args: {{'model_tag': "
                   f"'{model}', 'model': '{model}', 'trust_remote_code': True}}\n")
        assert start.feed(v2).phase == phase, model
    alone = Start("gb10-tp2", "head")  # the API server's line not read (an exporter started late): no guess
    alone.feed("(APIServer pid=211) INFO 12-01 09:58:02 [api_server.py:1805] vLLM API server version 0.32.0\n")
    assert alone.feed(v2).phase == "engine"


def test_a_graph_bar_still_being_drawn_is_read_live_and_its_last_redraw_when_it_closes() -> None:
    start = Start("gb10-tp2", "head")
    start.feed("(APIServer pid=211) INFO 08-09 09:58:02 [api_utils.py:286] non-default args: {}\n")
    start.feed("(Worker_TP0 pid=520) INFO 08-09 10:01:52 [gpu_worker.py:760] Available KV cache memory: 18.52 GiB\n")
    bar = "Capturing CUDA graphs (decode, FULL): {pct:3d}%|#         | {n}/19 [00:{e:02d}<00:{r:02d},  1.04it/s]"
    # tqdm writes "\r" + the bar at each redraw, and the newline only when the bar closes.
    view = start.feed("\r" + bar.format(pct=0, n=0, e=0, r=0).replace("<00:00", "<?"))
    view = start.feed("\r" + bar.format(pct=37, n=7, e=6, r=11), after_s=6)
    assert (view.phase, view.done, view.total, view.detail, view.eta_s) == ("graphs", 7, 19, "decode, FULL", 11)
    view = start.feed("\r" + bar.format(pct=100, n=19, e=18, r=0) + "\n", after_s=12)
    assert (view.done, view.total, view.eta_s) == (19, 19, 0.0)
    assert start.extractor.facts.get("graph_capture_done") == 19  # the closed line's last redraw, not its first


def test_ready_freezes_the_time_to_ready_and_a_new_engine_run_starts_over() -> None:
    start = Start("cpu-smoke")
    for line in (LOGS / "cpu-smoke-serve.log").read_text().splitlines(keepends=True):
        view = start.feed(line, after_s=0.5)
        if view.ready:
            break
    assert view.ready and view.line().startswith("ready after ")
    took = view.elapsed_s
    start.clock.now += 600
    assert start.tracker.view().elapsed_s == took
    again = start.feed("(APIServer pid=9) INFO 11-29 17:00:00 [api_utils.py:286] non-default args: {}\n")
    assert (again.phase, again.index, again.elapsed_s) == ("engine", 1, 0.0)


def test_before_the_first_line_there_is_no_phase() -> None:
    start = Start("cpu-smoke")
    view = start.tracker.observe(0, False, {}, False)
    assert (view.phase, view.index, view.fraction) == (None, 0, None)
    assert view.line() == "waiting for the engine's first log line"


@pytest.mark.parametrize(("text", "seconds"), [("00:50", 50), ("01:31", 91), ("1:02:03", 3723), ("?", None),
                                               (None, None), ("1:2:3:4", None), ("ab:cd", None)])
def test_tqdm_remaining_reads_as_seconds(text: str | None, seconds: float | None) -> None:
    assert tqdm_seconds(text) == seconds


def test_the_table_refuses_a_phase_entered_by_an_unknown_fact_or_a_count_without_its_total() -> None:
    raw = TABLE.model_dump(by_alias=True)
    raw["startup"][2]["enter"] = ["no_such_fact"]
    with pytest.raises(ValueError, match="startup weights: unknown fact 'no_such_fact'"):
        LogTable.model_validate(raw)
    raw = TABLE.model_dump(by_alias=True)
    raw["startup"][2]["total"] = None
    with pytest.raises(ValueError, match="`done` and `total` come together"):
        LogTable.model_validate(raw)
