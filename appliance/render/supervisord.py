"""supervisord.conf from a ServePlan: the engine, the health exporter, and a log tail to stdout.

Supervisor's config syntax: `%` must be `%%`, `environment=` is KEY="v",…, and ` ;` starts a
comment, so every value we write is quoted.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.render.plan import ServePlan

if TYPE_CHECKING:
    from appliance.lock import Target

STOP_WAIT_S: dict[Target, int] = {"gpu": 60, "cpu": 15}
"""Seconds supervisord waits for the engine's own stop before it SIGKILLs the engine's group, by target. A GPU serve's
clean shutdown (engine core, workers, NCCL teardown) takes seconds: a minute. The CPU build's takes under a second,
except where vLLM 0.31.0's API server waits for a request its killed engine never answers (docs/performance.md, P9):
15 s bounds that wait and still leaves a clean stop on a loaded machine ten times its usual time."""
START_SECS = 10
START_RETRIES = 3
CRASH_LIMIT, CRASH_WINDOW_S = 5, 600  # more engine crashes than this in the window stop the serve (crashguard)
LOG_BACKUPS = {"vllm": 2, "front": 1, "exporter": 1, "canary": 1}
"""How many earlier logs each program keeps beside its own (`stdout_logfile_backups`): supervisord's rotation at the
size cap and the start's (run/fresh_logs.py) shift them alike, as `vllm.log.1`, `vllm.log.2`."""
ENGINE_LOG = "vllm.log"  # in the run dir; the exporter's default --log is $APPLIANCE_LOG_DIR/ENGINE_LOG
EXPORTER_LOG = "exporter.log"
CONF_FILE = "supervisord.conf"  # in the run dir; supervisorctl -c names it (upgrade/serve.py, canary/ladder.py)


@dataclass(frozen=True)
class RunFiles:
    run_dir: Path
    socket: Path

    @classmethod
    def at(cls, run_dir: Path) -> RunFiles:
        """The files of the run folder `run_dir` (absolute); supervisor's control socket in the temporary folder,
        named after it (a socket's path holds at most 107 bytes; a run folder's may be longer)."""
        digest = hashlib.sha256(str(run_dir).encode()).hexdigest()[:10]
        return cls(run_dir, Path(tempfile.gettempdir()) / f"appliance-{digest}.sock")

    @property
    def conf(self) -> Path:
        return self.run_dir / CONF_FILE

    @property
    def engine_log(self) -> Path:
        return self.run_dir / ENGINE_LOG

    @property
    def exporter_log(self) -> Path:
        return self.run_dir / EXPORTER_LOG

    @property
    def pidfile(self) -> Path:
        return self.run_dir / "supervisord.pid"

    def program_log(self, program: str) -> Path:
        """Where a program's output goes: the engine and its setup steps share the serve log the exporter reads."""
        if program == "vllm" or program.startswith("setup"):
            return self.engine_log
        if program == "exporter":
            return self.exporter_log
        return self.run_dir / f"{program}.log"

    def paths(self) -> dict[str, Path]:
        """Every path supervisor itself opens (it expands `%(...)s` in some of them twice: verify_conf compares what
        it read back with these)."""
        return {"pidfile": self.pidfile, "childlogdir": self.run_dir, "socket": self.socket}


@dataclass(frozen=True)
class CrashguardSection:
    """The crash guard (appliance/run/crashguard.py), supervisord's event listener: the program it watches, how many
    of its exits within how many seconds stop the serve, the log it quotes when it does and supervisord's pidfile."""

    log: Path
    pidfile: Path
    program: str = "vllm"
    limit: int = CRASH_LIMIT
    window_s: int = CRASH_WINDOW_S

    @classmethod
    def of(cls, files: RunFiles) -> CrashguardSection:
        return cls(files.engine_log, files.pidfile)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "appliance.run.crashguard", "--program", self.program, "--limit",
                str(self.limit), "--window", str(self.window_s), "--log", str(self.log), "--pidfile", str(self.pidfile)]


@dataclass(frozen=True)
class LogtailSection:
    """The log tail to the container's stdout: the files it follows (the engine's, the exporter's)."""

    logs: tuple[Path, ...]

    @classmethod
    def of(cls, files: RunFiles) -> LogtailSection:
        return cls((files.engine_log, files.exporter_log))

    def argv(self) -> list[str]:
        # -q: no "==> file <==" headers between them
        return ["tail", "-q", "-n", "+1", "-F", *(str(log) for log in self.logs)]


def _esc(text: str) -> str:
    return text.replace("%", "%%")


def _env_line(env: dict[str, str]) -> str:
    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return ",".join(f"{k}={_esc(q(v))}" for k, v in env.items())


def _program(name: str, argv: list[str], env: dict[str, str], *, kind: str = "program", **opts: object) -> str:
    lines = [f"[{kind}:{name}]", f"command={_esc(shlex.join(argv))}"]
    if env:
        lines.append(f"environment={_env_line(env)}")
    lines += [f"{k}={_esc(str(v).lower() if isinstance(v, bool) else str(v))}" for k, v in opts.items()]
    return "\n".join(lines)


def render_conf(plan: ServePlan, files: RunFiles, engine_env: dict[str, str], exporter_argv: list[str],
                canary_argv: list[str] | None = None, front_argv: list[str] | None = None, *,
                crashguard: CrashguardSection | None = None,
                logtail: LogtailSection | None = None, stop_wait_s: int = STOP_WAIT_S["gpu"]) -> str:
    """The whole config. `engine_env` = plan env + caches; secrets are inherited, never written here.
    `canary_argv`: the correctness canary's watch (appliance/canary/watch.py), when the profile runs one.
    `front_argv`: the HTTP front on the API port (appliance/run/front.py), when the profile has one.
    `crashguard`, `logtail`: their sections (default: the run folder's)."""
    log = str(files.engine_log)
    crashguard, logtail = crashguard or CrashguardSection.of(files), logtail or LogtailSection.of(files)
    sections = [
        "\n".join([
            "[supervisord]", "nodaemon=true", "logfile=/dev/null", "logfile_maxbytes=0", "loglevel=info",
            f"pidfile={_esc(str(files.pidfile))}", f"childlogdir={_esc(str(files.run_dir))}",
        ]),
        f"[unix_http_server]\nfile={_esc(str(files.socket))}\nchmod=0700",
        "[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        f"[supervisorctl]\nserverurl=unix://{_esc(str(files.socket))}",
    ]
    for i, step in enumerate(plan.setup):
        sections.append(_program(f"setup{i}", step, engine_env, autorestart=False, startsecs=0, priority=10,
                                 redirect_stderr=True, stdout_logfile=log, stdout_logfile_maxbytes=0))
    if front_argv:  # before the engine: clients meet the front's 502 while it starts, never a refused connection
        sections.append(_program(
            "front", front_argv, {}, priority=15, autorestart=True, startsecs=1, stopsignal="TERM",
            stopwaitsecs=35, stopasgroup=True, killasgroup=True, redirect_stderr=True,
            stdout_logfile=str(files.program_log("front")), stdout_logfile_maxbytes="20MB",
            stdout_logfile_backups=LOG_BACKUPS["front"],
        ))
    sections.append(_program(
        "vllm", plan.argv, engine_env,
        priority=20, autostart=True, autorestart=True, startsecs=START_SECS, startretries=START_RETRIES,
        stopsignal="TERM", stopwaitsecs=stop_wait_s, stopasgroup=True, killasgroup=True,
        redirect_stderr=True, stdout_logfile=log, stdout_logfile_maxbytes="200MB",
        stdout_logfile_backups=LOG_BACKUPS["vllm"],
    ))
    sections.append(_program(
        "exporter", exporter_argv, {}, priority=30, autorestart=True, startsecs=2, stopsignal="TERM",
        stopwaitsecs=10, stopasgroup=True, killasgroup=True, redirect_stderr=True,
        stdout_logfile=str(files.program_log("exporter")), stdout_logfile_maxbytes="20MB",
        stdout_logfile_backups=LOG_BACKUPS["exporter"],
    ))
    if canary_argv:
        sections.append(_program(
            "canary", canary_argv, {}, priority=40, autorestart=True, startsecs=2, stopsignal="TERM",
            stopwaitsecs=10, stopasgroup=True, killasgroup=True, redirect_stderr=True,
            stdout_logfile=str(files.program_log("canary")), stdout_logfile_maxbytes="20MB",
            stdout_logfile_backups=LOG_BACKUPS["canary"],
        ))
    # The engine's output and the exporter's (its state changes with their reasons, the start's progress) also go
    # to the container's stdout, without a shell in either command.
    sections.append(_program(
        "logtail", logtail.argv(), {}, priority=25,
        autorestart=True, startsecs=0,
        stopsignal="TERM", stdout_logfile="/dev/stdout", stdout_logfile_maxbytes=0, redirect_stderr=True,
    ))
    sections.append(_program(
        "crashguard", crashguard.argv(), {}, kind="eventlistener",
        events="PROCESS_STATE_EXITED,PROCESS_STATE_STOPPED,PROCESS_STATE_FATAL",
        autorestart=True,
        stdout_logfile="NONE", stderr_logfile="/dev/stderr", stderr_logfile_maxbytes=0,
    ))
    return "\n\n".join(sections) + "\n"
