"""Shared fixtures. Engine fixtures start the REAL vLLM CPU build (installed by scripts/install-engine.sh);
when it is missing they fail loudly rather than skip."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests import debian_tools, hypothesis_profiles, orphans, ports, scheduling
from tests.shared_serve import SharedServe

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController

    from appliance.health.monitor import Monitor

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# Every CPU engine a test starts floats over the cores on one OpenMP thread instead of vLLM's `auto` binding, which
# pins each engine's worker to core 0 (the lowest cores, one left for the rest): two workers' engines then share core
# 0, and on this sandbox's scheduler a process pinned beside a busy worker barely runs (measured: 2 ms of CPU a second;
# a pinned `python -c` did not start in 20 s). That starved the offline-bundle serve beside the upgrade story's
# incumbent in a cold run and timed CI out. One thread is what `auto` gave each engine on 2 cores. A developer's own
# setting wins; tests/test_upgrade.py clears it where the candidate's own binding is what it tests.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
HYPOTHESIS_PROFILE = hypothesis_profiles.load()
"""Loaded before any test module is imported, so their `budget(n)` decorators see it."""
HIDDEN_TOOLS = debian_tools.hide_when_asked()
"""The Debian tools this session runs without (scripts/test.sh --quick hides them; tests/debian_tools.py)."""


def pytest_report_header(config: pytest.Config) -> list[str]:
    hidden = f"hidden from PATH: {', '.join(HIDDEN_TOOLS)}" if HIDDEN_TOOLS else "none hidden"
    return [f"hypothesis profile: {HYPOTHESIS_PROFILE} (${hypothesis_profiles.PROFILE_ENV}, or CI=true for full)",
            f"Debian tools: {hidden} (${debian_tools.HIDE_ENV}=1 hides them, as scripts/test.sh --quick does)"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Serves a killed earlier session left running are stopped (tests/orphans.py), and every child of this
    session carries its token, so the next one can do the same if this one is killed."""
    token = orphans.session_token()
    reaped = orphans.reap(token)
    if reaped:
        print(f"\nconftest: stopped {len(reaped)} process(es) a killed test session left running: {reaped}")
    os.environ[orphans.TOKEN_ENV] = token


@pytest.fixture(scope="module", autouse=True)
def _no_stranded_serves() -> Iterator[None]:
    """After each module (its fixtures torn down first: autouse runs outermost), a process of this session left
    behind by a killed command is stopped and named as a warning (tests/orphans.py `stranded`), so one test's
    timeout does not slow every later one."""
    yield
    token = os.environ.get(orphans.TOKEN_ENV)
    left = orphans.stranded(token) if token else []
    if left:
        import warnings

        names = [orphans.command(pid) for pid in left]
        orphans.reap(token, found=left)
        warnings.warn(f"stopped {len(left)} process(es) this module left running after their starter died: {names}",
                      stacklevel=1)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest) -> object:
    """Ports a fixture reserves stay reserved until that fixture is torn down (tests/ports.py). Registered
    before the fixture runs, so that it runs after the fixture's own teardown (finalizers run last first)."""
    taken = ports.push_owner()
    fixturedef.addfinalizer(lambda: ports.release(taken))
    try:
        return (yield)
    finally:
        ports.pop_owner()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """Ports the test body reserves stay reserved until it returns (its servers are stopped by then)."""
    ports.push_owner()
    try:
        return (yield)
    finally:
        ports.release(ports.pop_owner())


class UntilStopped:
    """`once()` over and over in a background thread from `with` until its end (load beside a serve: a client
    sending requests back to back, canary rounds back to back); the end waits for the call in flight."""

    def __init__(self, once: Callable[[], None], join_s: float = 90) -> None:
        self.once, self.join_s, self.stopped = once, join_s, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            self.once()

    def __enter__(self) -> UntilStopped:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(self.join_s)


def free_port() -> int:
    """A port nothing listens on, below the ephemeral range, reserved for this fixture or test (ports.py)."""
    return ports.reserve()


def master_port() -> int:
    """A master port whose derived ports (rendezvous + 1, fabric qualification + 2, model sync + 3) are reserved with
    it."""
    return ports.reserve(ports.MASTER_SPAN)


@dataclass
class Rank:
    """One process of a multi-rank test, with the file its output goes to."""

    name: str
    proc: subprocess.Popen[bytes]
    output: Path
    may_finish: bool = False
    """A one-shot step (the cross-node check) whose exit with status 0 is its success."""

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.output.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no output: {exc})"


def wait_for_ranks(predicate: Callable[[], bool], ranks: Sequence[Rank], timeout: float, what: str,
                   interval: float = 1.0) -> None:
    """Wait until `predicate` holds while every rank runs. A rank that exits first fails the test at once with
    its output: a head that cannot listen exits in seconds, while its worker would wait out its rendezvous
    timeout and the test its own."""
    start = time.monotonic()
    while True:
        with contextlib.suppress(Exception):
            if predicate():
                return
        gone = [r for r in ranks if r.proc.poll() is not None and (r.proc.returncode or not r.may_finish)]
        waited = time.monotonic() - start
        if gone or waited > timeout:
            why = (f"{gone[0].name} exited (status {gone[0].proc.returncode}) after {waited:.0f}s, before {what}"
                   if gone else f"no {what} within {timeout:.0f}s")
            rest = [r for r in ranks if r not in gone[:1]]
            pytest.fail("\n".join([why, *(f"--- {r.name} ---\n{r.tail()}" for r in gone[:1]),
                                    *(f"--- {r.name} (still running: {r.proc.poll() is None}) ---\n{r.tail(2000)}"
                                      for r in rest)]), pytrace=False)
        time.sleep(interval)


ENGINE_FIXTURES = frozenset({"vllm_engine"})
"""The fixtures every use of the real vLLM CPU engine goes through. A test whose fixture closure (its own fixtures
and theirs, `item.fixturenames`) holds one is marked `engine` at collection, so the marker is derived, never kept by
hand; tests/test_engine_marker.py proves no test or fixture reaches the engine around them."""


TOOL_FIXTURES = frozenset(f"{tool}_exe" for tool in debian_tools.TOOLS)
"""The fixtures every use of a Debian tool (tests/debian_tools.py TOOLS) goes through; they derive the `tools`
marker as ENGINE_FIXTURES derive `engine` (tests/test_debian_tools.py proves no test runs one around them)."""


def needs_engine(item: pytest.Item) -> bool:
    return bool(ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())))


def needs_tools(item: pytest.Item) -> bool:
    return bool(TOOL_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Runs before `-m` deselects, so `-m "not engine and not tools"` (scripts/test.sh --quick) leaves out every test
    that needs the engine or a Debian tool."""
    for item in items:
        if needs_engine(item) and item.get_closest_marker("engine") is None:
            item.add_marker(pytest.mark.engine)
        if needs_tools(item) and item.get_closest_marker("tools") is None:
            item.add_marker(pytest.mark.tools)
    scheduling.group_and_order(items)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:  # xdist, in the controller
    return scheduling.FileUnits(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: WorkerController) -> None:  # xdist, in the controller, once per worker
    """Every worker gets the same folder for the serial tests' locks (tests/scheduling.py)."""
    config = node.config
    if not hasattr(config, "_appliance_serial_lock"):
        config._appliance_serial_lock = tempfile.mkdtemp(prefix="appliance-test-serial-")
    node.workerinput[scheduling.LOCK_KEY] = config._appliance_serial_lock


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "_appliance_serial_lock"):
        shutil.rmtree(config._appliance_serial_lock, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """A `serial` test runs with no other worker's test beside it (tests/scheduling.py)."""
    lock = getattr(item.config, "workerinput", {}).get(scheduling.LOCK_KEY)
    with scheduling.turn(Path(lock) if lock else None, serial=scheduling.runs_alone(item)):
        return (yield)


@pytest.fixture(scope="session")
def vllm_engine() -> Path:
    """The real vLLM CPU engine's entry point (scripts/install-engine.sh installs it). A test that runs the engine,
    imports it or parses with its own parser asks for this fixture (directly, through another fixture or
    `usefixtures`); where the engine is missing it fails loudly rather than skip."""
    exe = BIN / "vllm"
    assert exe.exists(), "the vLLM CPU engine is not installed: run scripts/install-engine.sh"
    return exe


def _debian_tool(name: str) -> str:
    found = shutil.which(name)
    package, why = debian_tools.TOOLS[name]
    assert found, f"{name} is missing: apt-get install {package} (scripts/test.sh does); it {why}"
    return found


# One fixture per Debian tool (TOOL_FIXTURES): the tool's path, or a loud failure where it is missing.
@pytest.fixture(scope="session")
def chromium_exe() -> str:
    return _debian_tool("chromium")


@pytest.fixture(scope="session")
def promtool_exe() -> str:
    return _debian_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_exe() -> str:
    return _debian_tool("prometheus")


@pytest.fixture(scope="session")
def rsync_exe() -> str:
    return _debian_tool("rsync")


@pytest.fixture(scope="session")
def ip_exe() -> str:
    return _debian_tool("ip")


@pytest.fixture(scope="session")
def unshare_exe() -> str:
    return _debian_tool("unshare")


@pytest.fixture(scope="session")
def shellcheck_exe() -> str:
    return _debian_tool("shellcheck")


@pytest.fixture(scope="session")
def smoke_model_dir(vllm_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from appliance.run.model_location import prepared_model_dir
    from appliance.smoke_model import SMOKE_CHECKPOINT, prepare_smoke_model

    return prepare_smoke_model(prepared_model_dir(SMOKE_CHECKPOINT))


def wait_for(predicate, timeout: float, interval: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return True
        time.sleep(interval)
    return False


def wait_for_first_poll(monitor: Monitor, timeout: float = 30) -> None:
    """Until an in-process exporter's poll loop has read its (non-empty) log: before that first poll it says
    `starting` (health/state.py), whatever the log holds. Bounded for a loaded machine, where the poll thread may
    start late (CI of 976292a asked at once and read `starting`)."""
    assert wait_for(lambda: monitor.snapshot.lines_read > 0, timeout, 0.05), \
        f"the exporter's poll loop read nothing in {timeout:g} s"


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Serve:
    """`appliance run` under supervisord, as a test drives it."""

    proc: subprocess.Popen[bytes]
    run_dir: Path
    port: int
    health_port: int
    overrides: list[str]
    env: dict[str, str]
    output: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def exporter(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    def ctl(self, *args: str) -> str:
        return supervisorctl(self.run_dir, *args)

    def program_pid(self, name: str = "vllm") -> int:
        return int(self.ctl("pid", name))

    def stop(self, timeout: float = 90) -> float:
        return stop_supervisord(self.proc, timeout)


def supervisorctl(run_dir: Path, *args: str) -> str:
    return subprocess.run([str(BIN / "supervisorctl"), "-c", str(run_dir / "supervisord.conf"), *args],
                          capture_output=True, text=True, timeout=30, check=False).stdout.strip()


def stop_supervisord(proc: subprocess.Popen[bytes], timeout: float = 90) -> float:
    """SIGTERM an `appliance run` (supervisord); returns seconds to exit; SIGKILLs its group if it does not."""
    start = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return time.monotonic() - start


SERVE_CACHES: Path | None = None
"""This worker's one `cache` folder, which each start_serve home links to (`_serve_caches`), as one user's
APPLIANCE_HOME keeps its caches across starts; the rest of a home (upgrade records, the active channel) stays each
serve's own. A home's first start otherwise runs vLLM's model inspection in a spawned interpreter (vllm 0.32.0
model_executor/models/registry.py, `_run_in_subprocess`; the result is cached under VLLM_CACHE_ROOT/modelinfos): 19 s
of each start on this machine (61.0 s to healthy against 41.7 s, benchmarks/time_to_ready.py). None outside pytest
(the benchmarks): each home its own caches."""


@pytest.fixture(scope="session", autouse=True)
def _serve_caches(tmp_path_factory: pytest.TempPathFactory) -> None:
    global SERVE_CACHES
    SERVE_CACHES = tmp_path_factory.mktemp("serve-caches")


def serve_home(run_dir: Path, own_caches: bool = False) -> Path:
    """The APPLIANCE_HOME of a serve in `run_dir`: beside it, its `cache` folder this worker's shared one unless
    `own_caches` (a test that measures what a start writes into the caches)."""
    home = run_dir.parent / "home"
    if SERVE_CACHES is not None and not own_caches and not (home / "cache").exists():
        home.mkdir(parents=True, exist_ok=True)
        (home / "cache").symlink_to(SERVE_CACHES, target_is_directory=True)
    return home


EARLIER_RUN = "a line an earlier run of this folder wrote"


def start_serve(run_dir: Path, model_dir: Path, *overrides: str, env: dict[str, str] | None = None,
                profile: str = "cpu-smoke", own_caches: bool = False) -> Serve:
    port, health_port = free_port(), free_port()
    sets = [f"server.port={port}", f"server.health_port={health_port}", *overrides]
    full_env = {**os.environ, "APPLIANCE_PROFILE": profile, "APPLIANCE_MODEL_DIR": str(model_dir),
                "APPLIANCE_HOME": str(serve_home(run_dir, own_caches)), "HF_HUB_OFFLINE": "1",
                "APPLIANCE_SET": ";".join(sets), "PATH": f"{BIN}:{os.environ.get('PATH', '')}", **(env or {})}
    output = run_dir.parent / f"{run_dir.name}.out"
    proc = subprocess.Popen([str(BIN / "appliance"), "run", "--run-dir", str(run_dir)], env=full_env,
                            stdout=output.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    return Serve(proc, run_dir, port, health_port, sets, full_env, output)


def start_rank(tmp: Path, profile: str, model: Path, rank: int, host_ip: str, api: int, master: int,
               health: int | None = None) -> tuple[subprocess.Popen[bytes], dict[str, str], Path]:
    """Rank `rank` of a two-rank `appliance run` of `profile` on this host, at its own loopback address `host_ip`:
    (its supervisord, its environment, its run folder tmp/rankN; its output beside it in tmp/rankN.out)."""
    env = {**os.environ, "APPLIANCE_PROFILE": profile, "APPLIANCE_MODEL_DIR": str(model),
           "HF_HUB_OFFLINE": "1", "APPLIANCE_HOME": str(serve_home(tmp / f"rank{rank}")),
           "PATH": f"{BIN}:{os.environ['PATH']}",
           "APPLIANCE_SET": f"server.port={api}", "APPLIANCE_NODE_RANK": str(rank),
           "APPLIANCE_MASTER_ADDR": "127.0.0.1", "APPLIANCE_MASTER_PORT": str(master),
           "APPLIANCE_HOST_IP": host_ip, "APPLIANCE_HEALTH_PORT": str(health or free_port())}
    run_dir = tmp / f"rank{rank}"
    proc = subprocess.Popen([str(BIN / "appliance"), "run", "--run-dir", str(run_dir)], env=env,
                            stdout=(tmp / f"rank{rank}.out").open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, env, run_dir


def render_json(serve: Serve, profile: str = "cpu-smoke") -> dict[str, object]:
    out = subprocess.run([str(BIN / "appliance"), "render", profile, "--format", "json"], env=serve.env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.fixture(scope="session")
def shared_serve(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServe]:
    """One `appliance run cpu-smoke` for every test that only reads from it, ready (its exporter says so), with
    /status as polled from its start; each such test is guarded (tests/shared_serve.py)."""
    serve = start_serve(tmp_path_factory.mktemp("shared-serve") / "run", smoke_model_dir)
    statuses: list[dict] = []

    def ready() -> bool:
        body = httpx.get(f"{serve.exporter}/status", timeout=5).json()
        statuses.append(body)
        return body["state"] == "ready"

    if not wait_for(ready, timeout=600, interval=0.5):
        serve.stop()
        pytest.fail(f"the shared serve never turned ready:\n{serve.output.read_text()[-4000:]}")
    shared = SharedServe(serve, statuses)
    shared.check("when it turned ready")
    yield shared
    serve.stop()


@pytest.fixture(autouse=True)
def _shared_serve_untouched(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test whose fixtures lead to `shared_serve` finds it as the last test left it and leaves it so."""
    if scheduling.SHARED_SERVE not in request.fixturenames:
        yield
        return
    shared: SharedServe = request.getfixturevalue("shared_serve")
    shared.check(f"before {request.node.nodeid}")
    yield
    shared.check(f"after {request.node.nodeid}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """The shared serve stops once the tests that read it are done (tests/scheduling.py runs them in a row), not at
    the session's end: left idle it would hold its ~2 GB of memory through every later test on this worker, the
    upgrade story's side-by-side choice (MemAvailable) among them. A later reader would start it again."""
    result = yield
    shared = scheduling.SHARED_SERVE
    if shared in getattr(item, "fixturenames", ()) and shared not in getattr(nextitem, "fixturenames", ()):
        for fixturedef in item._fixtureinfo.name2fixturedefs.get(shared, ()):  # type: ignore[attr-defined]
            fixturedef.finish(item._request)  # type: ignore[attr-defined]
    return result


@pytest.fixture(scope="module")
def smoke_serve(smoke_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One `appliance run cpu-smoke` shared by a module's tests (a start costs ~30-60 s on 2 cores), in a run folder
    an earlier run left its logs in (EARLIER_RUN), as a reused one has."""
    run_dir = tmp_path_factory.mktemp("serve") / "run"
    run_dir.mkdir()
    for log in ("vllm.log", "exporter.log"):
        (run_dir / log).write_text(f"{EARLIER_RUN} ({log})\n")
    serve = start_serve(run_dir, smoke_model_dir)
    healthy = wait_for(lambda: http_ok(f"{serve.url}/health"), timeout=240, interval=2)
    if not healthy:
        serve.stop()
        pytest.fail(f"appliance run did not become healthy:\n{serve.output.read_text()[-4000:]}")
    yield serve
    serve.stop()
