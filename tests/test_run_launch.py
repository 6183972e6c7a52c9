"""The launch `appliance run` writes: no value from a profile, a flag or the environment is ever parsed by
supervisor (they stay in launch.json), and the supervisord.conf is proven by supervisor's own loader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from supervisor.options import ServerOptions

from appliance.errors import ApplianceError
from appliance.profile.loader import LoadedProfile, load_profile
from appliance.render.serveplan import Placement
from appliance.run.launch import resolve_launch, verify_conf, write_launch
from appliance.run.launchfile import LaunchFile, Program, read_launch
from appliance.settings import load_settings

HOSTILE = [
    "x\n[program:evil]\ncommand=/bin/touch /tmp/appliance-pwned",
    "name ; autostart=false",
    "name # comment",
    "50% %(here)s %(ENV_HOME)s",
    "a\r\nb\x00c",
]


def programs_in(conf: Path) -> dict[str, str]:
    """What supervisor itself reads from the file: program name -> command."""
    options = ServerOptions()
    options.configfile = str(conf)
    options.process_config(do_usage=False)
    return {p.name: p.command for g in options.process_group_configs for p in g.process_configs}


def hostile_launch(value: str, tmp_path: Path) -> LoadedProfile:
    """cpu-smoke with `value` in every free-text field that reaches a command or a file. model_copy skips
    validation: the supervisor file must be safe even for a value a loader would (rightly) refuse."""
    profile = load_profile("cpu-smoke").profile
    server = profile.server.model_copy(update={"served_model_name": value})
    return LoadedProfile(profile.model_copy(update={"description": value, "server": server}), tmp_path / "p.yaml")


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_cannot_add_a_program_or_change_a_command(value: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    loaded = hostile_launch(value, tmp_path)
    launch = resolve_launch(loaded, Placement(), load_settings(), None, tmp_path / "run", tmp_path / "home")
    conf = write_launch(launch)
    found = programs_in(launch.files.conf)
    assert sorted(found) == ["crashguard", "exporter", "logtail", "vllm"]
    assert found["vllm"].split() == [sys.executable, "-m", "appliance", "exec", "--launch",
                                     str(tmp_path / "run" / "launch.json"), "vllm"]
    assert "evil" not in conf and value not in conf
    # The value reaches the engine intact, through the launch file.
    argv = read_launch(launch.launch_file).programs["vllm"].argv
    assert argv[argv.index("--served-model-name") + 1] == value


def test_a_set_value_with_comment_and_percent_signs_reaches_the_engine_unchanged(tmp_path: Path) -> None:
    value = "m ; x=1 # y %(here)s 5%"
    r = subprocess.run([sys.executable, "-m", "appliance", "run", "cpu-smoke", "--dry-run", "--skip-doctor",
                        "--run-dir", str(tmp_path / "run"), "--set", f"server.served_model_name='{value}'",
                        "--set", f"description='{value}'"],  # YAML-quoted: ` #` would end a plain scalar
                       capture_output=True, text=True, timeout=120, check=False,
                       env={"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(tmp_path / "home"),
                            "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    assert sorted(programs_in(tmp_path / "run" / "supervisord.conf")) == ["crashguard", "exporter", "logtail", "vllm"]
    launch = json.loads((tmp_path / "run" / "launch.json").read_text())
    argv = launch["programs"]["vllm"]["argv"]
    assert argv[argv.index("--served-model-name") + 1] == value
    assert launch["profile"]["resolved"]["description"] == value


def test_the_run_folder_may_not_hold_what_supervisor_reads_as_a_comment(tmp_path: Path) -> None:
    loaded = load_profile("cpu-smoke")
    with pytest.raises(ApplianceError, match="the run folder") as err:
        resolve_launch(loaded, Placement(), load_settings(), None, tmp_path / "a ;b", tmp_path / "home")
    assert err.value.field == "--run-dir" and "[';']" in str(err.value)
    assert not (tmp_path / "a ;b").exists()


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


def test_the_exporter_judges_the_launched_profile_not_the_yaml_as_it_reads_later(tmp_path: Path) -> None:
    from appliance.commands.exporter import _from_launch

    r = subprocess.run([sys.executable, "-m", "appliance", "run", "cpu-smoke", "--dry-run", "--skip-doctor",
                        "--run-dir", str(tmp_path / "run"), "--set", "limits.max_num_seqs=3"],
                       capture_output=True, text=True, timeout=120, check=False,
                       env={"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(tmp_path / "home"),
                            "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    args, loaded = _from_launch(tmp_path / "run" / "launch.json")
    assert loaded.profile.limits.max_num_seqs == 3
    assert loaded.digest == load_profile("cpu-smoke", cli_overrides=["limits.max_num_seqs=3"]).digest
    assert args.log == tmp_path / "run" / "vllm.log" and args.node_rank == 0


def test_exec_runs_the_named_program_with_its_environment_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    path = tmp_path / "launch.json"
    LaunchFile("p", "d", "s", {}, "single", 0, {"vllm": Program(["sh", "-c", 'echo "$GREETING"'],
                                                                {"GREETING": "a ; b\nc"})}, []).write(path)
    run = [sys.executable, "-m", "appliance", "exec", "--launch", str(path)]
    ok = subprocess.run([*run, "vllm"], capture_output=True, text=True, timeout=60, check=False)
    assert (ok.returncode, ok.stdout) == (0, "a ; b\nc\n")
    bad = subprocess.run([*run, "evil"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "has no program 'evil' (it has vllm)" in bad.stderr


def dry_run(profile: str, run_dir: Path, home: Path, rung_sets: str = "") -> None:
    """`appliance run --dry-run`, as the canary's ladder re-renders a serve (the rung in APPLIANCE_SET)."""
    env = {"PATH": "/usr/bin:/bin", "APPLIANCE_HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "appliance", "run", profile, "--dry-run", "--skip-doctor",
                        "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=120, check=False,
                       env={**env, "APPLIANCE_SET": rung_sets} if rung_sets else env)
    assert r.returncode == 0, r.stderr


def test_after_a_step_down_rewrites_the_launch_the_exporter_judges_the_rung(tmp_path: Path) -> None:
    """The K4 guard is expected of prefix caching + speculative decoding: judging the profile the serve started
    with after the `no-prefix-caching` rung would wait for guard lines the relaunched engine never prints."""
    from appliance.commands.exporter import _from_launch
    from appliance.health.exporter import ExporterConfig, build_exporter
    from appliance.run.launch_profile import LaunchFollower

    run, home = tmp_path / "run", tmp_path / "home"
    dry_run("rtx-pro-6000-tp2", run, home)
    _, loaded = _from_launch(run / "launch.json")
    log = tmp_path / "vllm.log"
    log.write_text("")
    follower = LaunchFollower(run / "launch.json", loaded)
    exporter = build_exporter(ExporterConfig(loaded=loaded, log=log, role="single", follow=follower))
    try:
        def judged() -> set[str]:
            return {r.name for r in exporter.monitor.poll().evaluation.results}

        assert "guard-every-manager" in judged()
        assert "guard-every-manager" in judged()  # an unchanged launch.json: still the started profile
        dry_run("rtx-pro-6000-tp2", run, home, rung_sets="cache.prefix_caching=false")
        assert "guard-every-manager" not in judged()
        rung = load_profile("rtx-pro-6000-tp2", env_overrides=["cache.prefix_caching=false"])
        assert exporter.monitor.identity.profile_digest == rung.digest != loaded.digest
        status = exporter.monitor.snapshot.to_json(exporter.monitor.identity, 0.0)  # what /status serves
        assert status["profile"]["digest"] == rung.digest
        (run / "launch.json").write_text("{not json")  # a launch.json it cannot read keeps the last profile judged
        assert "guard-every-manager" not in judged() and follower.error
    finally:
        exporter.close()
