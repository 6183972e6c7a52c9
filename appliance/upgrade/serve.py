"""The serves an upgrade works with, natively (no container):

- `RunningServe`: an `appliance run` already serving from its run folder (the incumbent): its launch.json, its
  supervisord (the engine program stopped and started over its XML-RPC: `EngineControl`; its state through
  supervisorctl) and its exporter's /status;
- `StartedServe`: an `appliance run` this upgrade starts for the candidate, in its own run folder on its own ports,
  and stops again (TERM, then KILL of its process group); tied to this process, so that it stops too when this
  process is killed before it could stop it (run/tether.py);
- `wait_ready`: until the exporter says ready on the expected channel and profile, a budget runs out, or the serve
  shows it cannot come up (the engine restarting again and again, the exporter's `failed`, supervisord gone).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from appliance.errors import ApplianceError
from appliance.paths import venv_executable
from appliance.render.serveplan import http_url
from appliance.render.supervisord import CONF_FILE
from appliance.run.launchfile import ExporterSection, LaunchFile
from appliance.run.tether import tether_env

if TYPE_CHECKING:
    from appliance.health.monitor import StatusJson

Report = Callable[[str], None]
POLL_S = 1.0
CRASHES_TO_GIVE_UP = 2
"""Engine starts (after the first) that died while waiting: a crash loop, decided without spending the budget."""


def _health_port(launch: LaunchFile) -> int:
    return launch.exporter.port


def exporter_change(before: ExporterSection, after: ExporterSection) -> str:
    """What a relaunch would change of the running exporter's inputs ('' when nothing): a promote restarts the
    engine alone, so its exporter keeps watching the log, ports and peers it started with. The fabric report is a
    measurement each launch takes again, not an input that must hold."""
    old, new = before.to_json(), after.to_json()
    return "; ".join(f"exporter.{k}: {old[k]!r} -> {new[k]!r}" for k in old if k != "fabric" and old[k] != new.get(k))


@dataclass
class ServeStatus:
    """One look at a serve: the exporter's /status (None when it did not answer) and the engine program's state."""

    status: StatusJson | None
    program: str
    """supervisord's state of the engine program (RUNNING, STARTING, BACKOFF, EXITED, FATAL, STOPPED) or `gone`."""
    pid: int | None
    error: str | None = None

    @property
    def runs(self) -> int:
        return engine_runs(self.status)


def engine_runs(status: StatusJson | None) -> int:
    """The engine starts the exporter has read in the log (a `reset` line each, healthchecks/logchecks.yaml)."""
    return int(((status or {}).get("log") or {}).get("runs") or 0)


@dataclass
class RunningServe:
    run_dir: Path
    launch: LaunchFile

    @property
    def conf(self) -> Path:
        return self.run_dir / CONF_FILE

    @property
    def api_url(self) -> str:
        return http_url("127.0.0.1", self.launch.placement.api_port)

    @property
    def exporter_url(self) -> str:
        from appliance.run.exposure import asked_at

        return http_url(asked_at(self.launch.exporter.host), _health_port(self.launch))

    def ctl(self, *args: str, timeout: float = 120) -> tuple[int, str]:
        ctl = venv_executable("supervisorctl") or "supervisorctl"
        try:
            done = subprocess.run([ctl, "-c", str(self.conf), *args], capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 124, f"supervisorctl {' '.join(args)} did not answer in {timeout:g} s"
        return done.returncode, (done.stdout + done.stderr).strip()

    def engine_control(self, timeout: float = 120) -> EngineControl:
        """The engine's stop and start over supervisord's XML-RPC (a promote's restart, qualify's window), made
        ready now (the client's imports, the socket read from supervisord.conf), so that the stop follows a drain's
        idle look by milliseconds and the start follows the stop at once: `supervisorctl` would first start an
        interpreter (~0.1-0.3 s), inside a promote's out-of-service window. A conf that is missing or names no
        socket is an ApplianceError here, before any wait."""
        import configparser
        import xmlrpc.client

        from supervisor.xmlrpc import SupervisorTransport

        parser = configparser.ConfigParser()  # its interpolation reads render/supervisord.py's '%%' back as '%'
        try:
            url = parser.get("supervisorctl", "serverurl") if parser.read(self.conf, encoding="utf-8") else None
        except (configparser.Error, UnicodeError) as exc:
            raise ApplianceError(f"{self.conf} does not name supervisord's socket ({exc})",
                                 **_where(self.run_dir)) from None
        if not url:
            raise ApplianceError(f"{self.conf} is missing: no supervisord to stop or start the engine through",
                                 **_where(self.run_dir))
        rpc = xmlrpc.client.ServerProxy("http://127.0.0.1", SupervisorTransport(None, None, url))
        return EngineControl(rpc, self.run_dir, timeout)

    def program(self) -> tuple[str, int | None]:
        _, out = self.ctl("status", "vllm", timeout=20)
        words = out.split()
        state = words[1] if len(words) > 1 and words[0] == "vllm" else "gone"
        pid = None
        if "pid" in words:
            with contextlib.suppress(ValueError, IndexError):
                pid = int(words[words.index("pid") + 1].rstrip(","))
        return state, pid

    def look(self) -> ServeStatus:
        state, pid = self.program()
        try:
            status = httpx.get(f"{self.exporter_url}/status", timeout=5).json()
            return ServeStatus(status, state, pid)
        except (httpx.HTTPError, ValueError) as exc:
            return ServeStatus(None, state, pid, f"{type(exc).__name__}: {exc}")

    def alive(self) -> bool:
        return self.program()[0] != "gone"


def _where(run_dir: Path) -> dict[str, str]:
    return {"field": "--run-dir", "value": str(run_dir), "fix": "see supervisord's output of the serve"}


class EngineControl:
    """The engine program's stop and start through a supervisord XML-RPC client built beforehand. Each call runs
    in a worker thread, bounded by `timeout` (the client's socket has none), and returns when supervisord has
    done it: the stop once the program is stopped (its stop wait bounds that), the start once it has run its
    startsecs, as `supervisorctl` waits. Stopping a stopped engine and starting a started one are no error, as
    `supervisorctl` treats them."""

    def __init__(self, rpc: Any, run_dir: Path, timeout: float) -> None:
        self.rpc, self.run_dir, self.timeout = rpc, run_dir, timeout

    def stop(self) -> None:
        self._call("stop", "stopped", "NOT_RUNNING")

    def start(self) -> None:
        self._call("start", "started", "ALREADY_STARTED")

    def _call(self, action: str, done: str, harmless: str) -> None:
        import threading
        import xmlrpc.client

        said: list[BaseException] = []
        method = getattr(self.rpc.supervisor, f"{action}Process")

        def call() -> None:
            try:
                method("vllm", True)
            except BaseException as exc:  # handed to the caller's thread
                said.append(exc)

        worker = threading.Thread(target=call, name=f"{action}-engine", daemon=True)
        worker.start()
        worker.join(self.timeout)
        where = _where(self.run_dir)
        if worker.is_alive():
            raise ApplianceError(f"supervisord did not {action} the engine in {self.timeout:g} s ({self.run_dir})",
                                 **where)
        if not said:
            return
        exc = said[0]
        if not isinstance(exc, xmlrpc.client.Fault):
            self.rpc("close")()  # the client's one connection is left mid-request: the next call opens a new one
        if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
            raise ApplianceError(f"supervisord does not answer in {self.run_dir} ({exc}): the engine was not "
                                 f"{done}", **where)
        if isinstance(exc, OSError):
            raise ApplianceError(f"supervisord stopped answering during the engine's {action} in {self.run_dir} "
                                 f"({exc}): the engine may not have been {done}",
                                 **where)
        if not (isinstance(exc, xmlrpc.client.Fault) and harmless in exc.faultString):
            raise ApplianceError(f"supervisord refused to {action} the engine in {self.run_dir}: {exc}", **where)


@dataclass
class StartedServe(RunningServe):
    """A serve this upgrade started (`appliance run` as a child) and must stop."""

    proc: subprocess.Popen[bytes] | None = None
    output: Path | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 120) -> float:
        began = time.monotonic()
        if self.proc is not None:
            _stop(self.proc, timeout)
        return time.monotonic() - began

    def tail(self, lines: int = 20) -> str:
        return tail(self.output, lines)


def tail(path: Path | None, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace") if path else ""
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _stop(proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def start_serve(profile: str, run_dir: Path, overrides: list[str], env: dict[str, str], report: Report,
                wait_launch_s: float = 120) -> StartedServe:
    """`appliance run PROFILE --run-dir RUN_DIR --skip-doctor --set …` in its own session (the upgrade ran the
    checks doctor would, for the candidate's situation, itself). Returns once launch.json is written."""
    from appliance.run.launchfile import LaunchFileError, read_launch

    run_dir.mkdir(parents=True, exist_ok=True)
    output = run_dir.parent / f"{run_dir.name}.out"
    argv = [sys.executable, "-m", "appliance", "run", profile, "--run-dir", str(run_dir), "--skip-doctor"]
    for item in overrides:
        argv += ["--set", item]
    with output.open("wb") as out:
        # Tethered (run/tether.py): a starter killed outright takes the candidate with it. From this thread: Linux
        # signals the child when the thread that forked it ends.
        proc = subprocess.Popen(argv, env=env | tether_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + wait_launch_s
    launch_path = run_dir / "launch.json"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ApplianceError(f"the candidate's `appliance run` exited {proc.returncode} before it launched:\n"
                                 f"{tail(output)}", field="--to", value=profile,
                                 fix=f"read the output above (it is in {output})")
        if launch_path.exists():
            with contextlib.suppress(LaunchFileError):
                serve = StartedServe(run_dir, read_launch(launch_path), proc, output)
                report(f"candidate serve started (pid {proc.pid}) in {run_dir}: API {serve.api_url}, exporter "
                       f"{serve.exporter_url}")
                return serve
        time.sleep(0.5)
    _stop(proc)
    raise ApplianceError(f"the candidate's `appliance run` wrote no launch.json in {wait_launch_s:g} s:\n"
                         f"{tail(output)}", field="--to", value=profile)


@dataclass
class Ready:
    ok: bool
    seconds: float
    why: str
    status: StatusJson | None = None
    looks: int = 0
    restarts: int = 0


@dataclass
class Expect:
    """What the serve must show to count as up: the channel and profile digest (the new engine, not the old)."""

    channel: str | None = None
    profile_digest: str | None = None
    after_runs: int | None = None
    """The exporter must have seen more engine runs than this (a restart, not the engine before it)."""
    reasons: list[str] = field(default_factory=list)


def _mismatch(status: StatusJson, want: Expect) -> str | None:
    if want.channel and status.get("channel") != want.channel:
        return f"the exporter judges channel {status.get('channel')}, not {want.channel}"
    if want.profile_digest and (status.get("profile") or {}).get("digest") != want.profile_digest:
        return "the exporter judges another profile digest than the one launched"
    if want.after_runs is not None and engine_runs(status) <= want.after_runs:
        return "the engine has not started again yet"
    return None


def _starts_since(status: StatusJson | None, want: Expect) -> int:
    """Engine starts the exporter has read in the log since the restart. The pids seen count only the runs a poll
    happened to land in: on a loaded host a poll takes seconds and a start that dies in ten is missed, and then the
    serve's own crash guard stops supervisord before the loop is seen."""
    if status is None or want.after_runs is None:
        return 0
    return max(0, engine_runs(status) - want.after_runs)


def wait_ready(look: Callable[[], ServeStatus], want: Expect, budget_s: float, *,
               alive: Callable[[], bool] = lambda: True, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep, report: Report | None = None) -> Ready:
    """Poll until ready as expected; give up at the budget, or at once when the serve shows it cannot come up:
    supervisord gone, the engine FATAL, the exporter `failed` (a fatal signature), or the engine started
    CRASHES_TO_GIVE_UP more times (a crash loop)."""
    began = clock()
    pids: list[int] = []
    looks, last, note = 0, None, ""
    while True:
        elapsed = clock() - began
        looks += 1
        if not alive():
            return Ready(False, elapsed, "the serve's supervisord is gone", last, looks, max(0, len(pids) - 1))
        s = look()
        last = s.status or last
        if s.pid and (not pids or pids[-1] != s.pid):
            pids.append(s.pid)
        restarts = max(0, len(pids) - 1, _starts_since(last, want) - 1)
        if s.program == "FATAL":
            return Ready(False, elapsed, "the engine program is FATAL (it kept dying at start)", last, looks, restarts)
        if restarts >= CRASHES_TO_GIVE_UP:
            return Ready(False, elapsed, f"the engine started {restarts + 1} times and died each time (a crash loop)",
                         last, looks, restarts)
        if s.status is not None:
            state = s.status.get("state")
            wrong = _mismatch(s.status, want)
            if state == "ready" and wrong is None:
                return Ready(True, elapsed, "ready", s.status, looks, restarts)
            if state == "failed" and wrong is None:
                reasons = "; ".join(s.status.get("reasons") or []) or "see its /status"
                return Ready(False, elapsed, f"the exporter says failed: {reasons}", s.status, looks, restarts)
            now = f"{state}: {wrong or '; '.join(s.status.get('reasons') or [])}"
        else:
            now = f"exporter not answering ({s.error})"
        if report and now != note:
            report(f"  {elapsed:5.0f} s  {now[:200]}")
            note = now
        if elapsed >= budget_s:
            return Ready(False, elapsed, f"not ready within {budget_s:g} s (last: {now[:300]})", last, looks, restarts)
        sleep(POLL_S)
