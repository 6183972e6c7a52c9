"""tests/scheduling.py on a small real suite run the way scripts/test.sh runs the whole one: two pytest-xdist
workers, --dist loadfile, --no-loadscope-reorder, the real conftest hooks. Each test writes where and when it ran."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import scheduling
from tests.conftest import ROOT

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _repo_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

SCRIPT_WORKERS = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")

RECORDER = '''
import json, os, time
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def record(request):
    start = time.time()
    yield
    line = {"test": request.node.name, "file": request.node.path.name, "start": start, "end": time.time(),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "-")}
    with open(os.environ["SCHEDULE_LOG"], "a") as f:
        f.write(json.dumps(line) + "\\n")
'''

HOOKS = ("from tests import scheduling\n"
         "from tests.conftest import pytest_collection_modifyitems, pytest_configure_node, pytest_unconfigure, "
         "pytest_runtest_protocol, pytest_xdist_make_scheduler  # noqa: F401\n"
         "scheduling.DOCKER_FILES = ('test_d1.py', 'test_d2.py')  # this suite's Docker files\n")


def _suite(pytester: pytest.Pytester) -> None:
    """Run in a subprocess (pytester.runpytest_subprocess) with this repository on PYTHONPATH: its conftest rebinds
    scheduling.DOCKER_FILES, which must not happen in this process."""
    pytester.makeconftest(HOOKS + RECORDER)
    pytester.makeini("[pytest]\nmarkers =\n  docker: d\n  engine: e\n  rehearsal: r\n  gpu_stack_install: g\n"
                     "  serial: s\n")
    body = "import time, pytest\n"
    pytester.makepyfile(
        test_0_serial=body + "@pytest.mark.serial\ndef test_alone():\n    time.sleep(1.5)\n",
        test_a=body + "".join(f"def test_a{i}():\n    time.sleep(0.25)\n" for i in range(4)),
        test_b=body + "".join(f"def test_b{i}():\n    time.sleep(0.25)\n" for i in range(12)),
        test_d1=body + "pytestmark = pytest.mark.docker\n" + "def test_d1():\n    time.sleep(0.2)\n",
        test_d2=body + "pytestmark = pytest.mark.docker\n" + "def test_d2():\n    time.sleep(0.2)\n",
    )


def _runs(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_workers_share_out_files_keep_docker_together_and_a_serial_test_runs_alone(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _suite(pytester)
    log = tmp_path / "schedule.jsonl"
    monkeypatch.setenv("SCHEDULE_LOG", str(log))
    result = pytester.runpytest_subprocess(*SCRIPT_WORKERS, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=19)
    runs = _runs(log)
    assert len(runs) == 19
    assert {r["worker"] for r in runs} == {"gw0", "gw1"}, "one worker did all the work"
    for name in ("test_a.py", "test_b.py"):
        assert len({r["worker"] for r in runs if r["file"] == name}) == 1, f"{name} was split across workers"
    assert len({r["worker"] for r in runs if r["file"] in ("test_d1.py", "test_d2.py")}) == 1, \
        "the Docker files ran on two workers at once"
    alone = next(r for r in runs if r["test"] == "test_alone")
    beside = [r for r in runs if r is not alone and r["start"] < alone["end"] and r["end"] > alone["start"]]
    assert beside == [], f"tests ran beside the serial one: {beside}"
    # The turnstile: the serial test waited for the test in flight, not for the other worker's whole queue.
    other = [r for r in runs if r["worker"] != alone["worker"]]
    assert any(r["start"] >= alone["end"] for r in other), "the serial test ran only once the other worker was done"


def test_files_of_the_slow_kinds_are_collected_first_each_file_whole_and_in_order(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    ids = [line for line in result.outlines if "::" in line]
    assert [i.split("::")[0] for i in ids] == (["test_d1.py", "test_d2.py", "test_0_serial.py"] + ["test_a.py"] * 4
                                               + ["test_b.py"] * 12)
    assert [i.split("::")[1] for i in ids if i.startswith("test_b.py")] == [f"test_b{i}" for i in range(12)]


def test_scripts_test_sh_runs_both_tiers_with_these_workers() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    found = re.findall(r'^workers=\(-n "\$\{APPLIANCE_TEST_WORKERS:-(\d+)\}" (.*)\)$', script, re.MULTILINE)
    assert found == [("2", " ".join(SCRIPT_WORKERS[2:]))], found
    assert script.count('"${workers[@]}"') == 2, "the quick and the full tier should both run on the workers"


def test_a_docker_file_left_out_of_the_docker_unit_stops_the_collection(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makepyfile(test_d3="import pytest\npytestmark = pytest.mark.docker\ndef test_d3():\n    pass\n")
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "['test_d3.py'] hold docker tests and are not in DOCKER_FILES" in result.stderr.str()



def test_the_files_that_read_the_shared_serve_are_one_unit() -> None:
    """A session fixture is one per xdist worker: two files of the shared serve on two workers would start it twice."""
    scope = scheduling.FileUnits._split_scope
    units = {scope(None, f"{file}::t") for file in scheduling.SHARED_SERVE_FILES}  # type: ignore[arg-type]
    assert units == {"shared-serve"} and len(scheduling.SHARED_SERVE_FILES) >= 2
    assert scope(None, "tests/test_run_engine.py::t") == "tests/test_run_engine.py"  # type: ignore[arg-type]


def test_a_file_reading_the_shared_serve_left_out_of_its_unit_stops_the_collection(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makeconftest(HOOKS + "import pytest\n@pytest.fixture(scope='session')\ndef shared_serve():\n"
                          "    return 'a serve'\n")
    pytester.makepyfile(test_s1="def test_s1(shared_serve):\n    pass\n")
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "['test_s1.py'] hold tests that read the shared serve and are not in SHARED_SERVE_FILES" in \
        result.stderr.str()


def test_a_test_between_two_readers_of_the_shared_serve_stops_the_collection(pytester: pytest.Pytester) -> None:
    """The serve stops after a row of readers and the next reader starts it again: one test placed between them cost
    a whole start (255 s on 2026-12-06). The same tests with the other one first are collected."""
    pytester.makeconftest(HOOKS + "scheduling.SHARED_SERVE_FILES = ('test_s1.py',)\n"
                          "import pytest\n@pytest.fixture(scope='session')\ndef shared_serve():\n"
                          "    return 'a serve'\n")
    reader, other = "def test_r{}(shared_serve):\n    pass\n", "def test_other():\n    pass\n"
    pytester.makepyfile(test_s1=reader.format(1) + other + reader.format(2))
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "['test_s1.py::test_other'] do not read the shared serve and run between tests that do" in \
        result.stderr.str()
    pytester.makepyfile(test_s1=other + reader.format(1) + reader.format(2))
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
