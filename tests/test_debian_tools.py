"""The `tools` marker is derived (tests/conftest.py): every test whose fixtures lead to TOOL_FIXTURES gets it, and
`scripts/test.sh --quick` leaves it out and hides the tools. These tests prove the other half: no test runs a Debian
tool around those fixtures, and the hiding takes exactly the tools away."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import debian_tools, engine_uses
from tests.conftest import ROOT, TOOL_FIXTURES, needs_tools
from tests.tool_uses import tool_use

pytest_plugins = ["pytester"]


def _quick_line() -> str:
    found = [line for line in (ROOT / "scripts" / "test.sh").read_text().splitlines() if " -m pytest " in line
             and "quick[@]" in line]
    assert len(found) == 1, f"scripts/test.sh should run pytest once with the quick tier's -m; found {found}"
    return found[0]


def test_the_quick_tier_hides_the_tools_and_leaves_out_the_tests_that_ask_for_them() -> None:
    assert f"{debian_tools.HIDE_ENV}=1 exec " in _quick_line()
    quick = re.search(r'^\s*quick=\(-m "([^"]*)"\)$', (ROOT / "scripts" / "test.sh").read_text(), re.MULTILINE)
    assert quick and "not tools" in quick[1].split(" and ")


def test_each_tool_has_one_fixture_in_the_conftest_that_looks_up_that_tool() -> None:
    fixtures = engine_uses.Module.parse(ROOT / "tests" / "conftest.py").fixtures()
    looks_up = {(name, call.args[0].value) for name, func in fixtures.items() for call in ast.walk(func)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_debian_tool"
                and isinstance(call.args[0], ast.Constant)}
    assert looks_up == {(f"{tool}_exe", tool) for tool in debian_tools.TOOLS}
    assert {name for name, _ in looks_up} == TOOL_FIXTURES


def test_no_test_or_fixture_runs_a_debian_tool_without_its_fixture() -> None:
    checked = 0
    for modules, shared in engine_uses.suite_modules():
        assert modules, "no test modules found: the scan looks in the wrong folder"
        checked += len(modules)
        misses = engine_uses.unmarked_engine_uses(modules, shared, TOOL_FIXTURES, uses=tool_use)
        assert misses == [], ("these run a Debian tool but ask for none of the tool fixtures, so the quick tier "
                              "(-m 'not tools') would run them on a machine without it; ask for its `<tool>_exe` "
                              f"fixture (tests/conftest.py): {[m.key for m in misses]}")
    assert checked > 100


def test_the_scan_finds_each_way_of_running_a_tool_and_accepts_each_way_of_asking_for_it() -> None:
    module = engine_uses.Module.from_source("tests/probe.py", textwrap.dedent('''
        import shutil, subprocess
        import pytest

        def _ip(*args):
            subprocess.run(["ip", *args], check=True)

        def test_looks_it_up():
            assert shutil.which("chromium")

        def test_runs_it():
            subprocess.Popen(("rsync", "--daemon"))

        def test_through_a_helper():
            _ip("netns", "list")

        def test_as_a_shell_line():
            subprocess.run("promtool check metrics", shell=True)

        @pytest.fixture
        def a_fixture_that_runs_it():
            _ip("link")

        def test_asks_for_it(ip_exe):
            _ip("link")

        @pytest.fixture
        def namespaces(ip_exe):
            _ip("netns", "add", "x")

        def test_asks_through_a_fixture(namespaces):
            _ip("netns", "exec", "x", "true")

        @pytest.mark.usefixtures("rsync_exe")
        def test_asks_with_usefixtures():
            subprocess.run(["rsync", "-a", "a", "b"])

        @pytest.mark.docker
        def test_another_tier_left_out_of_quick_too():
            subprocess.run(["unshare", "--net", "true"])

        def test_names_a_tool_in_data_only():
            for name in ("prometheus", "grafana"):
                assert name
            subprocess.run(["sh", "-c", "true"])
    '''))
    conftest = engine_uses.Module.parse(ROOT / "tests" / "conftest.py")
    found = engine_uses.unmarked_engine_uses([module], [conftest], TOOL_FIXTURES, uses=tool_use)
    assert [p.name for p in found] == ["test_looks_it_up", "test_runs_it", "test_through_a_helper",
                                       "test_as_a_shell_line", "a_fixture_that_runs_it"]


def test_not_tools_deselects_every_test_whose_fixtures_lead_to_a_tool(pytester: pytest.Pytester,
                                                                      request: pytest.FixtureRequest) -> None:
    assert not needs_tools(request.node) and request.node.get_closest_marker("tools") is None
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems, chromium_exe, rsync_exe"
                          "  # noqa: F401")
    pytester.makepyfile(test_probe='''
        import pytest

        @pytest.fixture
        def a_daemon(rsync_exe):
            return rsync_exe

        def test_asks_directly(chromium_exe):
            pass

        def test_asks_through_a_fixture(a_daemon):
            pass

        @pytest.mark.usefixtures("rsync_exe")
        def test_asks_with_usefixtures():
            pass

        def test_needs_no_tool(tmp_path):
            pass
    ''')
    quick = pytester.inline_run("--collect-only", "-p", "no:cacheprovider", "-m", "not tools")
    deselected = [item for call in quick.getcalls("pytest_deselected") for item in call.items]
    assert [item.name for item in deselected] == ["test_asks_directly", "test_asks_through_a_fixture",
                                                  "test_asks_with_usefixtures"]
    assert all(item.get_closest_marker("tools") for item in deselected)
    assert [item.name for item in quick.getcall("pytest_collection_finish").session.items] == ["test_needs_no_tool"]


def _folder(path: Path, *programs: str) -> Path:
    path.mkdir(parents=True)
    for name in programs:
        (path / name).write_text("#!/bin/sh\necho $0\n")
        (path / name).chmod(0o755)
    return path


def test_without_takes_exactly_the_tools_off_path_and_leaves_other_folders_themselves(tmp_path: Path) -> None:
    system = _folder(tmp_path / "usr-bin", "rsync", "chromium", "git", "sh")
    venv = _folder(tmp_path / "venv-bin", "python", "appliance")
    local = _folder(tmp_path / "local-bin", "docker")
    path = os.pathsep.join([str(venv), str(system), str(local)])
    hidden = debian_tools.without(["rsync", "chromium", "docker"], path, tmp_path / "farm")
    folders = hidden.split(os.pathsep)
    assert folders[0] == str(venv) and folders[1] != str(system) and folders[2] != str(local)
    assert [shutil.which(name, path=hidden) for name in ("rsync", "chromium", "docker")] == [None, None, None]
    assert shutil.which("git", path=hidden) == f"{folders[1]}/git"
    assert shutil.which("appliance", path=hidden) == str(venv / "appliance")
    ran = subprocess.run(["git"], env={"PATH": hidden}, capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == f"{folders[1]}/git"  # a link to the real one, which runs
    assert (system / "rsync").exists() and (local / "docker").exists()  # nothing of the machine's is touched


def test_a_session_asked_to_hide_them_runs_without_any_and_its_children_too(tmp_path: Path) -> None:
    probe = ("import json, os, shutil, subprocess; from tests import debian_tools; hidden = debian_tools."
             "hide_when_asked(); child = subprocess.run(['sh', '-c', 'command -v rsync || echo none'], "
             "capture_output=True, text=True).stdout.strip(); print(json.dumps([hidden, "
             "[shutil.which(t) for t in hidden], child, bool(shutil.which('sh'))]))")
    env = {k: v for k, v in os.environ.items() if k != debian_tools.HIDDEN_ENV} | {debian_tools.HIDE_ENV: "1"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    hidden, found, child, sh = json.loads(done.stdout)
    assert hidden == [*debian_tools.TOOLS, *debian_tools.HIDDEN_TOO]
    assert found == [None] * len(hidden) and child == "none" and sh


def test_missing_names_each_absent_tools_package_once() -> None:
    assert debian_tools.missing({"PATH": "/nonexistent"}) == ["chromium", "prometheus", "rsync", "iproute2",
                                                               "util-linux", "shellcheck"]
