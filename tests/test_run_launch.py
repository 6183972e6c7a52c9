"""The launch `appliance run` writes: no value from a profile, a flag or the environment is ever parsed by
supervisor (they stay in launch.json), and the supervisord.conf is proven by supervisor's own loader."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from supervisor.options import ServerOptions

from appliance.errors import ApplianceError
from appliance.placement import Placement, resolve_placement
from appliance.profile.loader import LoadedProfile, load_profile
from appliance.render.supervisord import STOP_WAIT_S
from appliance.run.launch import (
    Launch,
    resolve_launch,
    resolve_place,
    resolve_serve,
    run_files,
    supervisord_conf,
    verify_conf,
    write_launch,
)
from appliance.run.launchfile import ExporterSection, LaunchFile, Program, read_launch
from appliance.settings import load_settings
from tests.in_process import CliRun, run_main


def launch_of(loaded: LoadedProfile, tmp_path: Path, given: Placement | None = None, *,
              measure_fabric: bool = True) -> Launch:
    """The launch `appliance run` resolves, in this process (no doctor, no checkpoint on disk). The fabric's
    measurement runs the engine's torch: without it, no engine is needed."""
    serve = resolve_serve(loaded, resolve_place(loaded, given or Placement()), None)
    return resolve_launch(serve, load_settings(), run_files(tmp_path / "run"), tmp_path / "home",
                          measure_fabric=measure_fabric)


ROOT = Path(__file__).resolve().parents[1]
HOSTILE = [
    "x\n[program:evil]\ncommand=/bin/touch /tmp/appliance-pwned",
    "name ; autostart=false",
    "name # comment",
    "50% %(here)s %(ENV_HOME)s",
    "a\r\nb\x00c",
]


def process_configs(conf: Path) -> dict[str, Any]:
    """What supervisor itself reads from the file: program name -> its process config."""
    options = ServerOptions()
    options.configfile = str(conf)
    options.process_config(do_usage=False)
    return {p.name: p for g in options.process_group_configs for p in g.process_configs}


def programs_in(conf: Path) -> dict[str, str]:
    """program name -> command, as supervisor reads them."""
    return {name: p.command for name, p in process_configs(conf).items()}


def hostile_launch(value: str, tmp_path: Path) -> LoadedProfile:
    """cpu-smoke with `value` in every free-text field that reaches a command or a file. model_copy skips
    validation: the supervisor file must be safe even for a value a loader would (rightly) refuse."""
    profile = load_profile("cpu-smoke").profile
    server = profile.server.model_copy(update={"served_model_name": value})
    return LoadedProfile(profile.model_copy(update={"description": value, "server": server}), tmp_path / "p.yaml")


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_cannot_add_a_program_or_change_a_command(value: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  vllm_engine: Path) -> None:
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    loaded = hostile_launch(value, tmp_path)
    launch = launch_of(loaded, tmp_path)
    conf = write_launch(launch)
    found = programs_in(launch.files.conf)
    assert sorted(found) == ["crashguard", "exporter", "logtail", "vllm"]
    assert found["vllm"].split() == [sys.executable, "-m", "appliance", "exec", "--launch",
                                     str(tmp_path / "run" / "launch.json"), "vllm"]
    assert "evil" not in conf and value not in conf
    # The value reaches the engine intact, through the launch file.
    argv = read_launch(launch.launch_file).programs["vllm"].argv
    assert argv[argv.index("--served-model-name") + 1] == value


def test_a_cpu_engines_stop_wait_is_the_cpu_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU engine's stop is SIGKILLed after 15 s (it bounds vLLM 0.31.0's wait on a request its killed engine never
    answers); a GPU serve keeps a minute for its NCCL teardown (render_conf's default: tests/test_run_path.py; a GPU
    launch needs its engine on the host)."""
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    loaded = load_profile("cpu-smoke")
    assert loaded.profile.hardware.target == "cpu"
    conf = tmp_path / "supervisord.conf"
    conf.write_text(supervisord_conf(launch_of(loaded, tmp_path, measure_fabric=False)))
    engine = process_configs(conf)["vllm"]
    assert engine.stopwaitsecs == STOP_WAIT_S["cpu"] == 15 < STOP_WAIT_S["gpu"]
    assert engine.killasgroup and engine.stopasgroup


def test_a_set_value_with_comment_and_percent_signs_reaches_the_engine_unchanged(tmp_path: Path) -> None:
    value = "m ; x=1 # y %(here)s 5%"
    r = _run_dry(tmp_path, "--set", f"server.served_model_name='{value}'",
                 "--set", f"description='{value}'")  # YAML-quoted: ` #` would end a plain scalar
    assert r.returncode == 0, r.stderr
    assert sorted(programs_in(tmp_path / "run" / "supervisord.conf")) == ["crashguard", "exporter", "logtail", "vllm"]
    launch = json.loads((tmp_path / "run" / "launch.json").read_text())
    argv = launch["programs"]["vllm"]["argv"]
    assert argv[argv.index("--served-model-name") + 1] == value
    assert launch["profile"]["resolved"]["description"] == value


def test_the_run_folder_may_not_hold_what_supervisor_reads_as_a_comment(tmp_path: Path) -> None:
    loaded = load_profile("cpu-smoke")
    with pytest.raises(ApplianceError, match="the run folder") as err:
        run_files(tmp_path / "a ;b")
    assert err.value.field == "--run-dir" and "[';']" in str(err.value)
    assert not (tmp_path / "a ;b").exists()
    r = run_main(["run", loaded.source.as_posix(), "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / "c #d")],
                 env={"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(tmp_path / "h")}, replace_env=True, limit_s=120)
    assert r.returncode == 2 and "the run folder" in r.stderr and not (tmp_path / "c #d").exists()


def test_a_config_with_an_extra_program_or_another_command_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "s.conf"
    base = f"[supervisord]\nlogfile=/dev/null\npidfile={tmp_path}/p\n\n[program:vllm]\ncommand=/bin/true a\n"
    conf.write_text(base)
    verify_conf(conf, {"vllm": ["/bin/true", "a"]})
    with pytest.raises(ApplianceError, match="would run"):
        verify_conf(conf, {"vllm": ["/bin/true", "a ;b"]})
    conf.write_text(base + "\n[program:evil]\ncommand=/bin/false\n")
    with pytest.raises(ApplianceError, match=r"defines the programs \['evil', 'vllm'\]"):
        verify_conf(conf, {"vllm": ["/bin/true", "a"]})
    conf.write_text(base + "[program:nocommand]\nautostart=true\n")
    with pytest.raises(ApplianceError, match="supervisor rejects it"):
        verify_conf(conf, {"vllm": None})


def exporter_config(launch: Path, *flags: str) -> tuple[Any, Any]:
    """What `appliance exporter --launch LAUNCH` builds its exporter from."""
    from appliance.commands.exporter import _from_launch, register

    parser = argparse.ArgumentParser()
    register(parser)
    return _from_launch(parser.parse_args(["--launch", str(launch), *flags]), load_settings())


def test_the_exporter_judges_the_launched_profile_not_the_yaml_as_it_reads_later(tmp_path: Path) -> None:
    r = _run_dry(tmp_path, "--set", "limits.max_num_seqs=3")
    assert r.returncode == 0, r.stderr
    config, _ = exporter_config(tmp_path / "run" / "launch.json")
    assert config.loaded.profile.limits.max_num_seqs == 3
    assert config.loaded.digest == load_profile("cpu-smoke", cli_overrides=["limits.max_num_seqs=3"]).digest
    assert config.log == tmp_path / "run" / "vllm.log" and config.role == "single"


def test_the_exporter_is_built_from_the_launchs_section_not_from_flags(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      vllm_engine: Path) -> None:
    """launch.json is the typed hand-off: the exporter's port, role, engine URL, peers, canary state and fabric
    report are data in it, read as they were resolved (an APPLIANCE_* variable set later changes nothing), and a
    flag that would say the same again beside --launch is refused rather than silently lost."""
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    loaded = load_profile("cpu-smoke", cli_overrides=["server.port=8123"])
    given = Placement(health_port=9555, origins={"health_port": "env:APPLIANCE_HEALTH_PORT"})
    launch = launch_of(loaded, tmp_path, given)
    write_launch(launch)
    written = read_launch(launch.launch_file)
    assert written.exporter == ExporterSection(log=tmp_path / "run" / "vllm.log", port=9555, host="127.0.0.1",
                                               role="single", engine_url="http://127.0.0.1:8123")
    assert written.placement == launch.place
    assert written.placement.origin("health_port") == "env:APPLIANCE_HEALTH_PORT"
    assert written.placement.origin("api_port") == "profile:server.port"
    monkeypatch.setenv("APPLIANCE_HEALTH_PORT", "9777")
    monkeypatch.setenv("APPLIANCE_NODE_RANK", "0")
    config, host = exporter_config(launch.launch_file)
    assert (config.port, config.host, config.role, config.engine_url) == (9555, "127.0.0.1", "single",
                                                                          "http://127.0.0.1:8123")
    assert config.canary_state is None and host.fabric is None and config.follow is not None
    for flag in (["--port", "9000"], ["--node-rank", "0"], ["--engine-url", "http://127.0.0.1:1"], ["--log", "x"]):
        with pytest.raises(ApplianceError, match="the launch file already says this") as err:
            exporter_config(launch.launch_file, *flag)
        assert err.value.field == flag[0]


def test_launch_json_read_back_is_the_serve_that_was_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """launch.json is the resolved serve's serialization: read back (run/launch_profile.read_serve) it is the same
    serve, its profile with each value's origin, its placement with origins, its plan, each program and the
    exporter's, crash guard's and log tail's sections; the argv's --port is the placement's api_port."""
    from appliance.run.launch_profile import read_serve

    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    loaded = load_profile("cpu-smoke", cli_overrides=["server.port=8123"])
    given = Placement(health_port=9555, origins={"health_port": "env:APPLIANCE_HEALTH_PORT"})
    launch = launch_of(loaded, tmp_path, given, measure_fabric=False)
    write_launch(launch)
    sent, back = launch.serve, read_serve(launch.launch_file)
    assert (back.loaded.digest, back.loaded.origins) == (sent.loaded.digest, sent.loaded.origins)
    assert back.loaded.origin("server.port") == "cli:--set"
    assert (back.place, dict(back.place.origins)) == (sent.place, dict(sent.place.origins))
    assert back.place.origin("health_port") == "env:APPLIANCE_HEALTH_PORT"
    assert back.plan == sent.plan and back.run == sent.run and back.run is not None
    assert (back.lock.digest, back.facts) == (sent.lock.digest, sent.facts)
    assert back.place.api_port == 8123 and back.plan.argv[back.plan.argv.index("--port") + 1] == "8123"


def test_a_launch_section_with_peers_canary_and_fabric_reaches_the_exporter_typed(tmp_path: Path) -> None:
    from appliance.multinode.fabric import judge
    from tests.test_fabric import MEASURED

    loaded = load_profile("cpu-smoke")
    place = resolve_placement(loaded.profile)
    fabric = judge(MEASURED, 2, None, "warn")
    section = ExporterSection(log=tmp_path / "vllm.log", port=9401, host="0.0.0.0", role="head",
                              engine_url="http://127.0.0.1:8000", peers={1: "http://10.0.0.2:8470"},
                              canary_state=tmp_path / "canary.json", fabric=fabric)
    path = tmp_path / "launch.json"
    LaunchFile(loaded.profile.name, loaded.digest, loaded.source.as_posix(), loaded.profile.model_dump(mode="json"),
               place, {}, section).write(path)
    assert read_launch(path).exporter == section
    config, host = exporter_config(path)
    assert config.peers == {1: "http://10.0.0.2:8470"} and config.canary_state == tmp_path / "canary.json"
    assert host.fabric == fabric and host.sections()["fabric"]["verdict"] == "pass"


def test_exec_runs_the_named_program_with_its_environment_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    path = tmp_path / "launch.json"
    place = resolve_placement(load_profile("cpu-smoke").profile)
    section = ExporterSection(log=tmp_path / "vllm.log", port=8470, host="0.0.0.0", role="single", engine_url=None)
    LaunchFile("p", "d", "s", {}, place, {"vllm": Program(["sh", "-c", 'echo "$GREETING"'],
                                                          {"GREETING": "a ; b\nc"})}, section).write(path)
    run = [sys.executable, "-m", "appliance", "exec", "--launch", str(path)]
    ok = subprocess.run([*run, "vllm"], capture_output=True, text=True, timeout=60, check=False)
    assert (ok.returncode, ok.stdout) == (0, "a ; b\nc\n")
    bad = subprocess.run([*run, "evil"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "has no program 'evil' (it has vllm)" in bad.stderr


def dry_run(profile: str, run_dir: Path, home: Path, *flags: str, env: dict[str, str] | None = None) -> None:
    """`appliance run --dry-run`: the launch a serve starts with."""
    base = {"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(home)}
    r = run_main(["run", profile, "--dry-run", "--skip-doctor", "--run-dir", str(run_dir), *flags],
                 env=base | (env or {}), replace_env=True, limit_s=120)
    assert r.returncode == 0, r.stderr


def step_down(profile: str, run_dir: Path, home: Path, *sets: str) -> Launch:
    """What the canary's ladder does to take a rung: the launch resolved again in this process, with the rung."""
    from appliance.canary.ladder import RungPlan, load_rung
    from appliance.run.launch import relaunch
    from appliance.run.launch_profile import serving_profile

    loaded = load_rung(serving_profile(run_dir / "launch.json")[0], RungPlan(1, "rung", list(sets)))
    return relaunch(loaded, run_dir / "launch.json", load_settings(), home, lambda line: None)


def test_a_step_down_resolves_the_launch_again_in_process_from_the_placement_the_serve_started_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `appliance run --dry-run` subprocess: the rung's profile goes through the same steps in the canary's own
    process, from the placement the serve was started with (its exporter port from APPLIANCE_HEALTH_PORT at start,
    whatever the watch's environment says now); supervisord.conf, which names only launch.json, stays byte for byte."""
    run, home = tmp_path / "run", tmp_path / "home"
    dry_run("cpu-smoke", run, home, "--set", "limits.max_num_seqs=3", env={"APPLIANCE_HEALTH_PORT": "9511"})
    conf = (run / "supervisord.conf").read_bytes()
    before = read_launch(run / "launch.json")
    monkeypatch.setenv("APPLIANCE_HOME", str(home))  # the watch runs in the serve's environment
    monkeypatch.setenv("APPLIANCE_HEALTH_PORT", "9999")  # ... where a value may differ now: the serve's placement holds

    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the step-down started a process: {args[0]!r}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    launch = step_down("cpu-smoke", run, home, "cache.prefix_caching=false")
    monkeypatch.undo()
    after = read_launch(run / "launch.json")
    assert "--no-enable-prefix-caching" in after.programs["vllm"].argv
    assert "--enable-prefix-caching" in before.programs["vllm"].argv
    assert after.profile["cache"]["prefix_caching"] is False and after.profile_digest == launch.loaded.digest
    assert after.placement == before.placement and after.placement.health_port == 9511
    assert after.placement.origin("health_port") == "env:APPLIANCE_HEALTH_PORT"
    assert after.exporter == before.exporter
    assert (run / "supervisord.conf").read_bytes() == conf


def test_the_ladder_takes_a_rung_without_re_entering_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """restart_with: the launch resolved again in process, then one command, supervisorctl restart vllm. The
    supervisorctl here is a stand-in (this unit test starts no supervisord; tests/test_canary_ladder_engine.py takes
    a rung under the real one). Against the old ladder it sees `python -m appliance run --dry-run` first."""
    from appliance.canary.ladder import RungPlan, restart_with
    from appliance.run.launch_profile import serving_profile

    run, home = tmp_path / "run", tmp_path / "home"
    monkeypatch.setenv("APPLIANCE_HOME", str(home))
    dry_run("cpu-smoke", run, home)
    commands: list[list[str]] = []

    def supervisorctl_stand_in(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        commands.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "vllm: stopped\nvllm: started\n", "")

    monkeypatch.setattr(subprocess, "run", supervisorctl_stand_in)
    base = serving_profile(run / "launch.json")[0]
    out = restart_with(RungPlan(1, "no-prefix-caching", ["cache.prefix_caching=false"]), base=base, run_dir=run)
    monkeypatch.undo()
    assert [c[1:] for c in commands] == [["-c", str(run / "supervisord.conf"), "restart", "vllm"]]
    assert Path(commands[0][0]).name == "supervisorctl" and out.endswith("vllm: started")
    assert "--no-enable-prefix-caching" in read_launch(run / "launch.json").programs["vllm"].argv


def test_after_a_step_down_rewrites_the_launch_the_exporter_judges_the_rung(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The K4 guard is expected of prefix caching + speculative decoding: judging the profile the serve started
    with after the `no-prefix-caching` rung would wait for guard lines the relaunched engine never prints."""
    from appliance.health.exporter import ExporterConfig, build_exporter
    from appliance.run.launch_profile import LaunchFollower

    run, home = tmp_path / "run", tmp_path / "home"
    monkeypatch.setenv("APPLIANCE_HOME", str(home))
    dry_run("rtx-pro-6000-tp2", run, home)
    loaded = exporter_config(run / "launch.json")[0].loaded
    log = tmp_path / "vllm.log"
    log.write_text("")
    follower = LaunchFollower(run / "launch.json", loaded)
    exporter = build_exporter(ExporterConfig(loaded=loaded, log=log, role="single", follow=follower))
    try:
        def judged() -> set[str]:
            return {r.name for r in exporter.monitor.poll().evaluation.results}

        assert "guard-every-manager" in judged()
        assert "guard-every-manager" in judged()  # an unchanged launch.json: still the started profile
        step_down("rtx-pro-6000-tp2", run, home, "cache.prefix_caching=false")
        assert "guard-every-manager" not in judged()
        rung = load_profile("rtx-pro-6000-tp2", env_overrides=["cache.prefix_caching=false"])
        assert exporter.monitor.identity.profile_digest == rung.digest != loaded.digest
        status = exporter.monitor.snapshot.to_json(exporter.monitor.identity, 0.0)  # what /status serves
        assert status["profile"]["digest"] == rung.digest
        (run / "launch.json").write_text("{not json")  # a launch.json it cannot read keeps the last profile judged
        assert "guard-every-manager" not in judged() and follower.error
    finally:
        exporter.close()


def _run_dry(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> CliRun:
    """`appliance run cpu-smoke --dry-run` in-process (tests/in_process.py) in a bare environment, as a container
    starts it; `appliance exec` (which execs) is the one command here run as a real process."""
    return run_main(["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--run-dir", str(tmp_path / "run"), *flags],
                    env={"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(tmp_path / "home"), **(env or {})},
                    replace_env=True, limit_s=120)


def test_run_warns_when_the_api_or_the_exporter_listens_beyond_loopback_unprotected(tmp_path: Path) -> None:
    """cpu-smoke sets no server.host (vLLM binds every interface) and no VLLM_API_KEY is set: `run` says so. A
    native single node's exporter binds loopback unless told (nobody off the host asks it); told 0.0.0.0 (what
    compose and Kubernetes set), `run` says /status is open."""
    r = _run_dry(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the API listens on every interface (server.host unset), port 8000, with no VLLM_API_KEY" in r.stderr
    assert "the exporter's /status" not in r.stderr
    assert json.loads((tmp_path / "run" / "launch.json").read_text())["exporter"]["host"] == "127.0.0.1"
    assert "# exporter bind: 127.0.0.1 (derived:single (no peer asks its exporter))" in r.stdout
    wide = _run_dry(tmp_path, env={"APPLIANCE_EXPORTER_HOST": "0.0.0.0"})
    assert "the exporter's /status and /metrics listen on 0.0.0.0" in wide.stderr
    assert json.loads((tmp_path / "run" / "launch.json").read_text())["exporter"]["host"] == "0.0.0.0"
    assert "# exporter bind: 0.0.0.0 (env:APPLIANCE_EXPORTER_HOST)" in wide.stdout

    keyed = _run_dry(tmp_path, "--set", "server.host=0.0.0.0", env={"VLLM_API_KEY": "sk-test-not-a-secret"})
    assert keyed.returncode == 0 and "the API listens" not in keyed.stderr, keyed.stderr
    assert "sk-test-not-a-secret" not in keyed.stdout + keyed.stderr


def test_the_exporter_bind_address_is_a_setting_and_loopback_quiets_both_warnings(tmp_path: Path) -> None:
    r = _run_dry(tmp_path, "--set", "server.host=127.0.0.1", env={"APPLIANCE_EXPORTER_HOST": "127.0.0.1"})
    assert r.returncode == 0, r.stderr
    assert "exposure" not in r.stderr
    assert json.loads((tmp_path / "run" / "launch.json").read_text())["exporter"]["host"] == "127.0.0.1"
    bad = _run_dry(tmp_path, env={"APPLIANCE_EXPORTER_HOST": "not a host!"})
    assert bad.returncode == 2 and "APPLIANCE_EXPORTER_HOST" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(("host", "loopback"), [(None, False), ("0.0.0.0", False), ("::", False),
                                                ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True),
                                                ("[::1]", True), ("localhost", True), ("10.0.0.2", False),
                                                ("head.example", False)])
def test_what_counts_as_loopback(host: str | None, loopback: bool) -> None:
    from appliance.run.exposure import is_loopback

    assert is_loopback(host) is loopback


def test_the_canary_watch_is_told_only_the_run_folder_and_reads_profile_origins_and_url_from_launch_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31: no program of a running serve loads the YAML. The watch's command names the run folder alone; the
    profile, the origin of each value (a --set pin the ladder must respect) and the engine's URL come from
    launch.json, and a run folder without one is a clean exit 2."""
    from appliance.canary import watch
    from appliance.run.launch_profile import serving_profile

    run, home = tmp_path / "run", tmp_path / "home"
    dry_run("cpu-smoke-canary", run, home, "--set", "cache.prefix_caching=true")
    launch = read_launch(run / "launch.json")
    argv = launch.programs["canary"].argv
    assert argv[1:] == ["-m", "appliance.canary.watch", "--run-dir", str(run)]
    assert launch.profile_origins["cache.prefix_caching"] == "cli:--set"
    loaded, url = serving_profile(run / "launch.json")
    assert loaded.origin("cache.prefix_caching") == "cli:--set" and loaded.digest == launch.profile_digest
    assert url == launch.placement.engine_url and url is not None
    assert json.loads((run / "launch.json").read_text())["profile"]["origins"] == launch.profile_origins

    assert watch.main(["--run-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "launch.json" in err and "Traceback" not in err
    plain = tmp_path / "plain"
    dry_run("cpu-smoke", plain, home)
    assert watch.main(["--run-dir", str(plain)]) == 0
    assert "no enabled canary section" in capsys.readouterr().out
