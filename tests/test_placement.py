"""Where a node stands, resolved once (appliance/placement.py): flags over APPLIANCE_* (cliargs) over the profile
(resolve_placement), each value with its origin; the engine URL, the exporter port check and the ports above the
master port derived there and nowhere else; what launch.json carries read back without pydantic."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.catalogue import load_catalogue
from appliance.channels.capabilities import ENV_SM120_DECODE
from appliance.cliargs import add_placement_args, placement_from_args
from appliance.errors import ApplianceError
from appliance.placement import Placement, ResolvedPlacement, resolve_placement
from appliance.profile import load_profile
from appliance.render.k8s import placements_for
from appliance.render.plan import build_plan, engine_env, plan_facts
from appliance.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]


def given_by(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Placement:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    add_placement_args(parser)
    return placement_from_args(parser.parse_args(argv), load_settings())


def test_a_flag_wins_over_the_environment_which_wins_over_the_profile_each_said_with_its_origin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile("cpu-smoke-2node").profile
    env = {"APPLIANCE_MASTER_PORT": "29700", "APPLIANCE_MASTER_ADDR": "10.0.0.1", "APPLIANCE_NODE_RANK": "1"}
    by_flag = resolve_placement(profile, given_by(["--master-port", "29800"], env, monkeypatch))
    assert (by_flag.master_port, by_flag.origin("master_port")) == (29800, "cli:--master-port")
    by_env = resolve_placement(profile, given_by([], env, monkeypatch))
    assert (by_env.master_port, by_env.origin("master_port")) == (29700, "env:APPLIANCE_MASTER_PORT")
    assert (by_env.node_rank, by_env.role, by_env.origin("node_rank")) == (1, "worker", "env:APPLIANCE_NODE_RANK")
    for name in env:
        monkeypatch.delenv(name)
    by_profile = resolve_placement(profile, given_by(["--master-addr", "10.0.0.1"], {}, monkeypatch))
    assert (by_profile.master_port, by_profile.origin("master_port")) == (profile.distributed.master_port,
                                                                          "profile:distributed.master_port")
    assert (by_profile.node_rank, by_profile.origin("node_rank")) == (0, "default")
    # The ports above the master port follow the one resolved, wherever it came from.
    assert (by_flag.rendezvous_port, by_flag.qualify_port) == (29801, 29802)


def test_the_engine_url_and_the_head_address_are_derived_once_by_role() -> None:
    profile = load_profile("cpu-smoke-2node", cli_overrides=["server.port=8123"]).profile
    head = resolve_placement(profile, Placement(node_rank=0, master_addr="fd00::1"))
    worker = resolve_placement(profile, Placement(node_rank=1, master_addr="fd00::1", host_ip="fd00::2"))
    assert head.engine_url == "http://127.0.0.1:8123" and worker.engine_url == "http://[fd00::1]:8123"
    assert worker.origin("engine_url").startswith("derived:")
    assert (head.host_ip, head.origin("host_ip")) == ("fd00::1", "derived:master_addr (the head's own address)")
    assert (worker.host_ip, worker.origin("host_ip")) == ("fd00::2", "given")
    read = resolve_placement(profile, Placement(node_rank=1, master_addr="10.0.0.1", fabric_ifname="fab0"),
                             interface_ip=lambda name: {"fab0": "10.0.0.7"}[name])
    assert (read.host_ip, read.origin("host_ip")) == ("10.0.0.7", "derived:fabric_ifname fab0")
    assert resolve_placement(profile, Placement(node_rank=1)).engine_url is None  # no head known: nothing to ask
    plan = build_plan(profile, read)
    assert plan.env["VLLM_HOST_IP"] == "10.0.0.7" and plan.argv[plan.argv.index("--master-port") + 1] == "29501"


@pytest.mark.parametrize("origin,field", [("env:APPLIANCE_HEALTH_PORT", "APPLIANCE_HEALTH_PORT"),
                                          ("cli:--port", "--port")])
def test_an_exporter_port_that_is_the_api_port_is_refused_naming_where_it_came_from(origin: str, field: str) -> None:
    profile = load_profile("cpu-smoke").profile
    with pytest.raises(ApplianceError, match="the API port too") as err:
        resolve_placement(profile, Placement(health_port=profile.server.port, origins={"health_port": origin}))
    assert err.value.field == field
    worker = resolve_placement(load_profile("cpu-smoke-2node").profile,  # a headless worker serves no API
                               Placement(node_rank=1, master_addr="10.0.0.1", health_port=8000))
    assert worker.health_port == 8000


def test_a_resolved_placement_round_trips_and_says_what_it_was_given() -> None:
    profile = load_profile("cpu-smoke-2node").profile
    given = Placement(node_rank=1, master_addr="10.0.0.1", master_port=29700, model_dir=Path("/m"),
                      origins={"node_rank": "env:APPLIANCE_NODE_RANK", "master_addr": "cli:--master-addr",
                               "master_port": "env:APPLIANCE_MASTER_PORT"})
    place = resolve_placement(profile, given)
    again = ResolvedPlacement.from_json(json.loads(json.dumps(place.to_json())))
    assert again == place and dict(again.origins) == dict(place.origins)
    assert again.given() == Placement(node_rank=1, master_addr="10.0.0.1", master_port=29700, model_dir=Path("/m"))
    assert again.given().origins == {"node_rank": "env:APPLIANCE_NODE_RANK", "master_addr": "cli:--master-addr",
                                     "master_port": "env:APPLIANCE_MASTER_PORT", "model_dir": "given"}
    # Another profile resolved from the same inputs: its own ports, the node's own givens.
    moved = resolve_placement(load_profile("cpu-smoke-2node", cli_overrides=["server.port=8124"]).profile,
                              again.given())
    assert (moved.api_port, moved.engine_url, moved.master_port) == (8124, "http://10.0.0.1:8124", 29700)
    with pytest.raises((KeyError, TypeError, ValueError)):
        ResolvedPlacement.from_json({**place.to_json(), "master_port": {"value": "29700", "origin": "x"}})


def test_the_precedence_of_a_placement_value_is_written_in_one_place_only() -> None:
    """Flags over APPLIANCE_* is cliargs.placement_from_args; given over the profile is resolve_placement. No other
    module of the package reads a placement variable from the settings or falls back to the profile's distributed
    section itself. Mutant this kills: appliance/commands/logscan.py's old `args.node_rank if args.node_rank is not
    None else settings.node_rank` (a second copy of the rule, without the flag's bounds)."""
    import re

    from appliance.cliargs import PLACEMENT_ENV

    reads = re.compile(rf"\bsettings\.({'|'.join(n for n in PLACEMENT_ENV if n not in ('model_dir', 'health_port'))})\b"
                       r"|\bor \w+\.distributed\.")
    owners = {ROOT / "appliance" / "cliargs.py", ROOT / "appliance" / "placement.py"}
    copies = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sorted((ROOT / "appliance").rglob("*.py"))
              if path not in owners for n, line in enumerate(path.read_text().splitlines(), 1) if reads.search(line)]
    assert copies == []


def test_kubernetes_pods_get_their_ports_from_the_same_resolution() -> None:
    profile = load_profile("cpu-smoke-2node", cli_overrides=["distributed.master_port=29610"]).profile
    places = placements_for(profile)
    assert {role: (p.master_port, p.rendezvous_port) for role, p in places.items()} == {
        "head": (29610, 29611), "worker": (29610, 29611)}
    assert places["head"].origin("master_addr") == "k8s:LWS_LEADER_ADDRESS"


def test_the_plan_takes_the_catalogue_and_channel_facts_it_is_given() -> None:
    """No hidden read of the catalogue below plan_facts: the SM120 switches follow the facts passed in."""
    profile = load_profile("gb10-tp2").profile
    facts = plan_facts(profile)
    gpus = load_catalogue().gpus
    assert engine_env(profile, facts)[ENV_SM120_DECODE] == "1"
    assert ENV_SM120_DECODE not in engine_env(profile, replace(facts, gpu=gpus["cpu"]))
    place = resolve_placement(profile, Placement(node_rank=0, master_addr="10.0.0.1"))
    assert ENV_SM120_DECODE not in build_plan(profile, place, facts=replace(facts, gpu=gpus["cpu"])).env
    assert build_plan(profile, place).env[ENV_SM120_DECODE] == "1"  # the shipped catalogue's gb10: SM121


def test_what_launch_json_carries_is_read_back_without_pydantic(tmp_path: Path) -> None:
    """`appliance exec` (every engine restart) and the placement type stay standard library."""
    from appliance.run.launchfile import ExporterSection, LaunchFile

    place = resolve_placement(load_profile("cpu-smoke").profile)
    LaunchFile("p", "d", "s", {}, place, {},
               ExporterSection(tmp_path / "log", 8470, "0.0.0.0", "single", "http://127.0.0.1:8000")).write(
        tmp_path / "launch.json")
    code = ("import sys; from pathlib import Path; from appliance.run.launchfile import read_launch; "
            f"l = read_launch(Path({str(tmp_path / 'launch.json')!r})); "
            "print(l.placement.engine_url, l.exporter.port, sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('pydantic', 'prometheus_client', 'yaml')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         cwd=ROOT).stdout.split()
    assert out == ["http://127.0.0.1:8000", "8470", "[]"]
