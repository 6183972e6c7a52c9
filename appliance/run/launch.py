"""The launch sequence of `appliance run`, as named steps that end in one resolved `Launch`:

    run_files        the run folder, checked (supervisor reads its name) and created, once
    resolve_place    this node's placement, resolved once against the profile (+ the fabric address and a multi-node
                     rank's network identity), every value with its origin (appliance/serve/resolve.py)
    sync_from_head   distributed.sync_model, a worker: take the head's verified snapshot first (W4)
    check_profile    locate the checkpoint and check it complete (W3); validate with its real facts (exit 2 on errors)
    resolve_serve    the ResolvedServe (appliance/serve/): the placement with the located checkpoint, the channel's
                     lock and facts, the plan
    preflight_host   doctor's checks for this node's role (the caller refuses the start on a failure)
    resolve_launch   the plan's programs made absolute + the consistency exchange (multi-node; the head gets its
                     workers' exporters; with distributed.sync_model it serves its snapshot read-only meanwhile,
                     W4) + the fabric qualification (K25) + engine env (caches) + each program's section
    write_launch     launch.json (the resolved serve's serialization: profile, placement, plan, programs, the
                     exporter's section) + supervisord.conf, atomically, proven by supervisor's own loader
    relaunch         the canary's step-down: the same launch again with a rung's profile, in this process

Library code: it reports through the `report` callable it is given and raises ApplianceError on bad input.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from appliance.channels.engines import EngineInstall, find_engine, require_engine
from appliance.doctor import Check, checks_text, run_doctor
from appliance.errors import ApplianceError
from appliance.health.canary_state import STATE_FILE
from appliance.multinode.fabric_report import FabricReport
from appliance.multinode.netident import Tables
from appliance.multinode.netif import ipv4_of
from appliance.multinode.rendezvous import Peer, preflight
from appliance.paths import appliance_home, make_dir, venv_executable
from appliance.placement import Placement, ResolvedPlacement
from appliance.profile.loader import LoadedProfile, engine_digest
from appliance.profile.model import Profile
from appliance.render.serveplan import ServePlan
from appliance.render.supervisord import STOP_WAIT_S, CrashguardSection, LogtailSection, RunFiles, render_conf
from appliance.rules import context_for, require_valid
from appliance.rules.caveats import to_show
from appliance.run.caches import cache_env
from appliance.run.exposure import exporter_bind
from appliance.run.launchfile import LAUNCH_MODE, LaunchFile, LaunchFileError, read_launch
from appliance.run.model_location import hf_offline, locate, read_facts
from appliance.safe_write import write_files
from appliance.serve.resolve import placement, resolve
from appliance.serve.resolved import CANARY, ENGINE, FRONT, FRONT_STATE, ResolvedServe, RunSections
from appliance.serve.sections import ExporterSection, PlanSection, Program
from appliance.settings import ApplianceSettings
from appliance.weights.pins import revision_for
from appliance.weights.stamps import stamp_root

Report = Callable[[str], None]
LAUNCH_FILE = "launch.json"
EXPORTER = "exporter"
# Characters supervisor's config reader gives a meaning to even inside a value (comments, line breaks, and `%`:
# supervisor expands `%(ENV_X)s` in a log file's path twice, so `%%` is no escape there): a run folder holding one
# could not be named in supervisord.conf safely.
_CONF_UNSAFE = frozenset(";#%") | {chr(c) for c in range(32)} | {"\x7f"}


@dataclass(frozen=True)
class Launch:
    """Everything `appliance run` resolved: the serve (its programs and their sections), where its files are, its
    engine's environment, next to whom."""

    serve: ResolvedServe
    """Its plan's programs absolute on this host, its run sections set."""
    files: RunFiles
    env: dict[str, str]
    """The engine's and setup steps' environment: the plan's + caches (+ HF_HUB_OFFLINE for a local model)."""
    peers: dict[int, Peer] = field(default_factory=dict)
    exporter_host_origin: str = "default"
    """Where the exporter's bind address came from (run/exposure.exporter_bind)."""

    @property
    def loaded(self) -> LoadedProfile:
        return self.serve.loaded

    @property
    def place(self) -> ResolvedPlacement:
        return self.serve.place

    @property
    def plan(self) -> ServePlan:
        return self.serve.plan

    @property
    def sections(self) -> RunSections:
        assert self.serve.run is not None  # resolve_launch sets them
        return self.serve.run

    @property
    def fabric(self) -> FabricReport | None:
        """This rank's fabric qualification (K25), handed to its exporter in launch.json."""
        return self.sections.exporter.fabric

    @property
    def canary(self) -> list[str] | None:
        """The correctness canary's watch (appliance/canary/watch.py), on a head or single node whose profile runs
        one."""
        watch = self.sections.canary
        return None if watch is None else watch.argv

    @property
    def exporter_host(self) -> str:
        return self.sections.exporter.host

    @property
    def launch_file(self) -> Path:
        return self.files.run_dir / LAUNCH_FILE

    def exporter(self) -> ExporterSection:
        """The exporter's section of launch.json: every input of `appliance exporter --launch`, from this launch."""
        return self.sections.exporter

    def programs(self) -> dict[str, Program]:
        return dict(self.sections.programs)

    def supervised(self) -> dict[str, list[str]]:
        """supervisord program -> its command: the appliance's own, with the launch file's path only."""
        launch = ["--launch", str(self.launch_file)]
        out = {name: [sys.executable, "-m", "appliance", "exec", *launch, name] for name in self.programs()}
        return out | {EXPORTER: [sys.executable, "-m", "appliance", "exporter", *launch]}


def run_files(run_dir: Path, field: str = "--run-dir") -> RunFiles:
    """The run folder, checked and created once; `field` names where it came from (the flag or the variable).
    Absolute: supervisord.conf and every program's arguments name paths in it (a relative `-x` would read as a flag,
    and supervisord resolves relative paths against its own working folder)."""
    run_dir = run_dir.absolute()
    check_run_dir(run_dir, field)  # supervisord.conf names it: no '%', ';', '#' or control character
    make_dir(run_dir, field)
    return RunFiles.at(run_dir)


def resolve_place(loaded: LoadedProfile, given: Placement | ResolvedPlacement, model_dir: Path | None = None, *,
                  tables: Tables | None = None) -> ResolvedPlacement:
    """This node's placement, once (appliance/serve/resolve.py): given over the profile, the fabric interface's
    address read here, a multi-node rank's network identity resolved from this host's tables and checked (K39:
    before the rendezvous, so before NCCL), and the checkpoint folder `check_profile` located."""
    return placement(loaded.profile, given, interface_ip=ipv4_of, tables=tables or Tables(), model_dir=model_dir)


def resolve_serve(loaded: LoadedProfile, place: ResolvedPlacement, model_dir: Path | None) -> ResolvedServe:
    """The serve on this node (appliance/serve/resolve.py): `place` (resolved before the checkpoint was located) with
    the checkpoint folder, the channel's lock and facts, the plan."""
    return resolve(loaded, place, model_dir=model_dir)


def sync_from_head(loaded: LoadedProfile, place: ResolvedPlacement, settings: ApplianceSettings,
                   report: Report) -> None:
    """distributed.sync_model on a worker whose copy is not complete: fetch what it lacks from the head's snapshot
    over the fabric (rsync, master port + 3), before anything else; check_profile then checks it on arrival.
    The head serves while the ranks meet (serve_snapshot), so this waits for it as long as the rendezvous would."""
    profile = loaded.profile
    if not profile.distributed.sync_model or place.role != "worker":
        return
    revision = revision_for(profile.model.checkpoint, profile.model.revision)
    if revision is None:
        return  # W2 refuses the profile in check_profile
    if place.model_dir is not None:
        report(f"appliance run: model sync skipped: APPLIANCE_MODEL_DIR={place.model_dir} is served as it is")
        return
    from appliance.weights.rsync import MODULE_MODEL, SECRET_ENV
    from appliance.weights.snapshot import check_hub_snapshot
    from appliance.weights.sync import daemon_peer, pull, wait_for_daemon

    here = check_hub_snapshot(profile.model.checkpoint, revision, stamp_root=stamp_root(appliance_home()))
    if here.complete:
        report(f"appliance run: model sync: nothing to fetch, {here.summary()}")
        return
    if not place.master_addr:
        raise ApplianceError("a multi-node serve needs the head's fabric address", field="APPLIANCE_MASTER_ADDR",
                             fix="set APPLIANCE_MASTER_ADDR on every node to the head's address on the fabric")
    port = place.model_sync_port
    report(f"appliance run: model sync: {here.summary()}; fetching it from the head at {place.master_addr}:{port}")
    wait_for_daemon(place.master_addr, port, settings.rendezvous_timeout_s)
    pull(profile.model.checkpoint, revision, daemon_peer(place.master_addr, port, MODULE_MODEL),
         secret=os.environ.get(SECRET_ENV) or None, report=report)


@contextlib.contextmanager
def serve_snapshot(profile: Profile, plan: ServePlan, place: ResolvedPlacement, report: Report) -> Iterator[None]:
    """distributed.sync_model on the head: its complete snapshot, served read-only on its fabric address while the
    block runs (the rendezvous: a worker joins it only once its copy arrived). Nothing else is served."""
    if not profile.distributed.sync_model or plan.role != "head":
        yield
        return
    from appliance.weights.hub import repo_folder
    from appliance.weights.rsync import MODULE_MODEL, SECRET_ENV, daemon

    storage, model_dir = repo_folder(profile.model.checkpoint), place.model_dir
    if model_dir is None or not model_dir.resolve().is_relative_to(storage.resolve()):
        raise ApplianceError(
            f"distributed.sync_model: the head has no complete snapshot of {profile.model.checkpoint} in its hub "
            f"cache ({'APPLIANCE_MODEL_DIR is served instead' if model_dir else 'it is not on disk'})",
            field="distributed.sync_model", value=True,
            fix="run `appliance fetch-model` on the head first (and unset APPLIANCE_MODEL_DIR), or turn "
                "distributed.sync_model off and give every rank its own copy",
            reason="W4: the workers copy the head's verified snapshot; the head must have one")
    address = place.master_addr or place.host_ip or "127.0.0.1"
    with daemon(MODULE_MODEL, storage, address=address, port=place.model_sync_port, writable=False,
                secret=os.environ.get(SECRET_ENV) or None,
                report=lambda line: report(f"appliance run: {line}")):
        yield


def check_profile(loaded: LoadedProfile, given: Placement | ResolvedPlacement, report: Report) -> Path | None:
    """The checkpoint's folder when it is on disk and complete (W3); the profile re-validated with its real facts."""
    profile = loaded.profile
    revision = revision_for(profile.model.checkpoint, profile.model.revision)
    found = locate(profile.model.checkpoint, revision, given.model_dir, stamp_root=stamp_root(appliance_home()),
                   profile_name=profile.name)  # W3: an incomplete or damaged snapshot is refused here
    model_dir = found.folder if found else None
    if found is not None:
        report(f"appliance run: checkpoint {found.check.summary()}")
    ctx = context_for(profile)
    if model_dir is not None:
        ctx = context_for(profile, read_facts(model_dir, ctx.checkpoint))
    shown, caveats = to_show(require_valid(ctx, "nothing started"), profile)
    for finding in shown:
        report(finding.render())
    if caveats:
        report(f"appliance run: {caveats}")
    if model_dir is None and hf_offline():
        raise ApplianceError(
            f"checkpoint {profile.model.checkpoint} is not on disk and HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}",
            field="APPLIANCE_MODEL_DIR", value=None,
            fix="set APPLIANCE_MODEL_DIR, or run `appliance fetch-model` (or `appliance smoke-model` for cpu-smoke)",
            reason="the engine would fail to load and be restarted in a loop")
    return model_dir



def preflight_host(serve: ResolvedServe, settings: ApplianceSettings, report: Report) -> list[Check]:
    """doctor for this node's role, port and channel (reading the host through APPLIANCE_PROCFS / APPLIANCE_KMSG);
    returns the failed checks."""
    profile = serve.profile
    checks = run_doctor(profile, serve.role, procfs=settings.procfs, kmsg=settings.kmsg, api_port=serve.place.api_port,
                        engine_port=serve.place.engine_port,
                        lock=serve.lock)
    if checks:
        report(checks_text(checks, False, profile.name))
    return [c for c in checks if c.status == "fail"]


def absolute_programs(plan: ServePlan, engine: EngineInstall | None = None) -> ServePlan:
    """The plan with its programs (the engine and any setup step, e.g. `ray start`) made absolute: the channel's
    engine environment first (an engine venv of another channel than this environment's), then this environment's
    bin/ (supervisord's PATH may not hold it)."""

    def absolute(argv: list[str]) -> list[str]:
        found = engine.executable(argv[0]) if engine is not None else None
        return [found or venv_executable(argv[0]) or argv[0], *argv[1:]]

    return replace(plan, argv=absolute(plan.argv), setup=[absolute(step) for step in plan.setup])


def engine_plan(serve: ResolvedServe, *, engine_required: bool = True) -> ServePlan:
    """The serve's plan, run by its channel's engine (its engine venv when it is not this environment's); without
    it on this host, ApplianceError (exit 2), unless not `engine_required` (a dry run renders this environment's
    programs)."""
    engine = require_engine(serve.lock) if engine_required else find_engine(serve.lock)
    return absolute_programs(serve.plan, engine)


def join_peers(profile: Profile, plan: ServePlan, place: ResolvedPlacement,
               settings: ApplianceSettings) -> dict[int, Peer]:
    if plan.role == "single":
        return {}
    return preflight(profile, plan, place, timeout_s=settings.rendezvous_timeout_s)


def qualify_fabric(profile: Profile, plan: ServePlan, place: ResolvedPlacement, report: Report) -> FabricReport | None:
    """K25: after the rendezvous agreed, measure this rank's link to the head over the engine's backend;
    ApplianceError (exit 2) below a floor the profile refuses."""
    if plan.role == "single":
        return None
    from appliance.multinode.fabric import qualify_for

    result = qualify_for(profile, plan, place)
    for problem in result.problems:
        report(f"appliance run: WARNING {problem}")
    peers = ", ".join(f"rank {r}: {m.bandwidth_gbps:.2f} GB/s, {m.latency_us:.0f} us"
                      for r, m in sorted(result.peers.items()))
    report(f"appliance run: fabric {result.verdict} over {result.backend} ({peers})")
    return result


def check_conf_path(field: str, path: Path, what: str = "run folder") -> None:
    """A path supervisord.conf will name holds nothing supervisor's reader gives a meaning to."""
    from appliance.redact import clip

    unsafe = sorted({ch for ch in str(path) if ch in _CONF_UNSAFE})
    if unsafe:
        raise ApplianceError(f"{field}: the {what} {clip(str(path), 200)!r} holds {unsafe!r}", field=field,
                             value=clip(str(path), 200), fix="choose a folder without ';', '#', '%' or control "
                             "characters", reason="supervisord.conf names it, and supervisor reads those as comments "
                             "or line breaks, and expands `%(ENV_X)s` in a log path twice (another file, or a "
                             "secret's value in a file name)")


def check_run_dir(run_dir: Path, field: str = "--run-dir") -> None:
    check_conf_path(field, run_dir)
    # supervisor's control socket lives in the temporary folder
    check_conf_path("TMPDIR", Path(tempfile.gettempdir()), "temporary folder")


def resolve_launch(serve: ResolvedServe, settings: ApplianceSettings, files: RunFiles, home: Path,
                   report: Report = print, *, measure_fabric: bool = True) -> Launch:
    """`measure_fabric=False` (a dry run, a step-down): the fabric qualification is skipped and said so; it needs
    every rank to measure at once, so one rank's dry run would wait for peers that never come."""
    profile, place = serve.profile, serve.place
    plan = engine_plan(serve, engine_required=measure_fabric)
    # Keyed by the channel's lock: an edit of another channel leaves this serve's compile caches warm.
    caches = cache_env(serve.lock.digest, engine_digest(profile), home / "cache")
    for name in sorted(set(profile.engine.extra_env) & set(caches)):  # the rules' X3 for what `run` adds
        raise ApplianceError(f"engine.extra_env.{name}: the appliance sets it (APPLIANCE_HOME owns it)",
                             field=f"engine.extra_env.{name}", value=name,
                             fix="remove it from engine.extra_env and set APPLIANCE_HOME",
                             reason="the compile caches are keyed by the lock and engine digest: another folder "
                                    "would mix the artefacts of different engines")
    with serve_snapshot(profile, plan, place, report):  # W4: the workers fetch while the ranks meet
        peers = join_peers(profile, plan, place, settings)
    fabric = qualify_fabric(profile, plan, place, report) if measure_fabric else None
    if not measure_fabric and plan.role != "single":
        report("appliance run: fabric qualification (K25) skipped: a dry run measures nothing")
    env = plan.env | caches
    if place.model_dir is not None:  # a checkpoint on disk: the engine asks no hub for it
        env.setdefault("HF_HUB_OFFLINE", "1")
    bind = exporter_bind(place.role, place.host_ip, settings.exporter_host)
    watch = canary_watch(serve.loaded, plan, files.run_dir, place.engine_url)
    programs = {f"setup{i}": Program(step, env) for i, step in enumerate(plan.setup)}
    programs[ENGINE] = Program(plan.argv, env)
    if serve.profile.server.front:
        programs[FRONT] = Program(front_argv(serve.profile.server.host, place.api_port, files.run_dir,
                                             str(place.engine_url)), {})
    if watch:
        programs[CANARY] = Program(watch, {})
    # The head compares the NCCL each worker loaded (K15) through the workers' exporters.
    exporter = ExporterSection(log=files.engine_log, port=place.health_port, host=bind.host, role=place.role,
                               engine_url=place.engine_url,
                               peers={rank: peer.health_url for rank, peer in sorted(peers.items()) if peer.health_url},
                               canary_state=files.run_dir / STATE_FILE if watch else None, fabric=fabric)
    run = RunSections(files.run_dir, programs, exporter, CrashguardSection.of(files), LogtailSection.of(files))
    return Launch(serve.started(plan, run), files, env, peers, exporter_host_origin=bind.origin)


def front_argv(host: str | None, port: int, run_dir: Path, engine_url: str) -> list[str]:
    """The front on the API port (all interfaces where server.host is unset, as the engine itself would), its own
    engine the fallback."""
    listen = f"[{host}]:{port}" if host and ":" in host else f"{host or ''}:{port}"
    return [sys.executable, "-m", "appliance.run.front", "--listen", listen, "--state", str(run_dir / FRONT_STATE),
            "--fallback", engine_url]


def front_state(backend: str) -> str:
    return json.dumps({"backend": backend}) + "\n"


def canary_watch(loaded: LoadedProfile, plan: ServePlan, run_dir: Path, engine_url: str | None) -> list[str] | None:
    """The canary's watch command, where the profile runs one and this node serves the API. It names only the run
    folder: the watch reads the profile, its origins and the engine's URL from launch.json, as the exporter does, and
    a step-down rewrites launch.json with the rung and restarts only the engine."""
    c = loaded.profile.canary
    if c is None or not c.enabled or plan.role == "worker" or not engine_url:
        return None
    return [sys.executable, "-m", "appliance.canary.watch", "--run-dir", str(run_dir)]


def launch_file(launch: Launch) -> LaunchFile:
    """The resolved serve's serialization (run/launch_profile.py reads it back)."""
    loaded, plan = launch.loaded, launch.plan
    return LaunchFile(
        profile_name=loaded.profile.name, profile_digest=loaded.digest, profile_source=loaded.source.as_posix(),
        profile=loaded.profile.model_dump(mode="json"), placement=launch.place, programs=launch.programs(),
        exporter=launch.exporter(), profile_origins=dict(loaded.origins),
        plan=PlanSection(plan.argv, plan.env, plan.setup))


def supervisord_conf(launch: Launch) -> str:
    commands = launch.supervised()
    programs = ServePlan(commands["vllm"], {}, launch.plan.role,
                         [commands[f"setup{i}"] for i in range(len(launch.plan.setup))])
    return render_conf(programs, launch.files, {}, commands[EXPORTER], commands.get(CANARY), commands.get(FRONT),
                       crashguard=launch.sections.crashguard, logtail=launch.sections.logtail,
                       stop_wait_s=STOP_WAIT_S[launch.loaded.profile.hardware.target])


def write_launch(launch: Launch, *, starting: bool = False) -> str:
    """launch.json and supervisord.conf as one pair through the one writer: staged beside their targets, the config
    read back with supervisor's own loader (it must define exactly the planned programs and files), then put in
    place together; on a refusal or a failure neither changes. `starting`: `appliance run` starting the serve, whose
    front (if any) starts on its own engine; a relaunch (a promote, a canary step-down) leaves the front's routing
    as it is (a promote --beside routes to its bridge meanwhile)."""
    conf = supervisord_conf(launch)
    files: dict[Path, str] = {launch.launch_file: launch_file(launch).text(), launch.files.conf: conf}
    if starting and FRONT in launch.programs():
        files[launch.files.run_dir / FRONT_STATE] = front_state(str(launch.place.engine_url))
    planned = launch.supervised() | {"logtail": None, "crashguard": None}
    # Both its owner's only (LAUNCH_MODE): launch.json holds each program's environment.
    write_files(files, field="--run-dir", mode=LAUNCH_MODE,
                verify=lambda staged: verify_conf(staged[launch.files.conf], planned, launch.files))
    return conf


def verify_conf(path: Path, planned: dict[str, list[str] | None], files: RunFiles | None = None) -> None:
    """supervisor's own reader finds exactly `planned` (name -> argv; None: any command) in the file, and (given
    `files`) every path it will open where the plan put it: the programs' logs, its pidfile, log folder and socket.
    Supervisor expands `%(...)s` in some paths twice; whatever it reads them as, the check is on what it read."""
    from supervisor.options import ServerOptions

    options = ServerOptions()
    options.configfile = str(path)
    try:
        options.process_config(do_usage=False)
    except ValueError as exc:
        raise _conf_error(path, f"supervisor rejects it: {exc}") from None
    programs = {p.name: p for group in options.process_group_configs for p in group.process_configs}
    found = {name: p.command for name, p in programs.items()}
    if sorted(found) != sorted(planned):
        raise _conf_error(path, f"it defines the programs {sorted(found)}, the plan {sorted(planned)}")
    for name, argv in planned.items():
        if argv is not None and shlex.split(found[name]) != argv:
            raise _conf_error(path, f"program {name} would run {found[name]!r}, not {shlex.join(argv)!r}")
    if files is None:
        return
    section = options.configroot.supervisord
    sockets = [s.get("file") for s in section.server_configs if s.get("family") == socket.AF_UNIX]
    seen = {"pidfile": section.pidfile, "childlogdir": section.childlogdir, "socket": sockets[0] if sockets else None}
    want = {what: str(p) for what, p in files.paths().items()}
    for name, program in programs.items():
        if planned.get(name) is not None:  # the appliance's own programs log into the run folder
            seen[f"program {name} log"] = program.stdout_logfile
            want[f"program {name} log"] = str(files.program_log(name))
    for what, path_wanted in want.items():
        if str(seen.get(what)) != path_wanted:
            raise _conf_error(path, f"supervisor reads the {what} as {seen.get(what)!r}, the plan wrote "
                                    f"{path_wanted!r}")


def _conf_error(path: Path, detail: str) -> ApplianceError:
    return ApplianceError(f"the supervisord.conf written for this launch is wrong: {detail}", field="supervisord.conf",
                          value=str(path), fix="report this: `appliance run` must write what it planned",
                          reason="supervisord would run something other than the plan")


def describe(launch: Launch) -> str:
    """The programs as they will run, for `run --dry-run` (values from launch.json, never from the config)."""
    lines = [f"# {launch.launch_file}: the programs as supervisord will start them"]
    lines += [f"# {name}: {shlex.join(p.argv)}" for name, p in launch.programs().items()]
    ex = launch.exporter()
    peers = ", ".join(f"{rank}={url}" for rank, url in ex.peers.items()) or "-"
    lines.append(f"# {EXPORTER}: appliance exporter --launch {launch.launch_file}: log {ex.log}, {ex.host}:{ex.port}, "
                 f"{ex.role}, engine {ex.engine_url or '-'}, peers {peers}, canary {ex.canary_state or '-'}, "
                 f"fabric {ex.fabric.verdict if ex.fabric else '-'}")
    lines += [f"# placement {name}: {v['value']} ({v['origin']})" for name, v in launch.place.to_json().items()]
    from appliance.render.plan import fabric_env_origins

    lines += [f"# network {name}={value} ({origin})"
              for name, (value, origin) in fabric_env_origins(launch.loaded.profile, launch.place).items()]
    lines.append(f"# exporter bind: {launch.exporter_host} ({launch.exporter_host_origin})")
    # One line per program whatever a value holds: a newline inside one is shown, never printed raw.
    return "\n".join(line.replace("\r", "\\r").replace("\n", "\\n") for line in lines)


def relaunch(loaded: LoadedProfile, launch_path: Path, settings: ApplianceSettings, home: Path,
             report: Report = print) -> Launch:
    """The launch at `launch_path` again, with `loaded` (a canary rung's profile): the same node, told the same
    (its placement's given values), resolved against the new profile, its checkpoint re-checked; launch.json
    rewritten (supervisord.conf names only that file, so it stays). The caller restarts the engine."""
    launch = resolve_relaunch(loaded, launch_path, settings, home, report)
    write_launch(launch)
    return launch


def resolve_relaunch(loaded: LoadedProfile, launch_path: Path, settings: ApplianceSettings, home: Path,
                     report: Report = print) -> Launch:
    """`relaunch` without the write: for a caller that checks the new launch first (an upgrade's promote)."""
    try:
        previous = read_launch(launch_path)
    except LaunchFileError as exc:
        raise ApplianceError(str(exc), field="launch.json", value=str(launch_path),
                             fix="restart the serve (`appliance run`): it rewrites the launch") from None
    was = previous.placement
    given = was.given()
    if was.model_dir is not None:  # the same checkpoint folder as the serve started on, however it was found
        given = replace(given, model_dir=was.model_dir, origins={**given.origins, "model_dir": was.origin("model_dir")})
    model_dir = check_profile(loaded, given, report)
    serve = resolve(loaded, given, interface_ip=ipv4_of, tables=Tables(procfs=settings.procfs, sysfs=settings.sysfs),
                    model_dir=model_dir)
    return resolve_launch(serve, settings, run_files(launch_path.parent), home, report, measure_fabric=False)
