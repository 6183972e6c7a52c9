"""`doctor`: each check is ok / warn / fail / skip with a detail line; any fail refuses the start."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from appliance.catalogue import GpuFacts, load_catalogue
from appliance.doctor.gpu import GpuProbe, probe_gpus
from appliance.doctor.host import memlock_limit, port_in_use, running_engines
from appliance.hostmem.admission import admit, nvml_free_gib
from appliance.hostmem.sources import kernel_hits, kernel_log_this_boot, load_kernel_checks, mem_available_gib
from appliance.placement import api_port_of
from appliance.profile.model import Profile

if TYPE_CHECKING:
    from appliance.lock import ChannelLock

CheckStatus = Literal["ok", "warn", "fail", "skip", "unknown"]
"""unknown: the source could not be read (never reported as ok)."""


GPUS_VISIBLE = "H1"
GPU_ARCH = "H2"
GPU_MODEL = "H3"
PORT_FREE = "H4"
NO_OTHER_ENGINE = "H5"
STACK_AS_LOCKED = "H6"
"""The doctor's checks that rest on no validate rule: their own stable ids, defined (title, reason, fix) in
appliance/rulebook.py DEFINED_HERE and so listed by `appliance rules` and docs/rules.md like every other id."""


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str
    rule: str
    """The id of the rule or doctor check this line rests on (`appliance rules` explains it): every line has one."""
    fix: str | None = None
    parts: tuple[Check, ...] = ()
    """The findings this one stands for (each with its rule id): `--json` lists them, the text names their rules."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def checks_text(checks: list[Check], as_json: bool, profile: str) -> str:
    """The report as `doctor` and `run` print it: a table fitted to the terminal (one line per check, and one per
    fix, when piped), or one JSON document."""
    if as_json:
        return json.dumps({"profile": profile, "ok": not any(c.status == "fail" for c in checks),
                           "checks": [c.as_dict() for c in checks]}, indent=2)
    if not checks:
        return ""
    from appliance.table import render

    rows = []
    for c in checks:
        rows.append([c.status.upper(), c.rule, c.name, c.detail])
        if c.fix and c.status == "fail":
            rows.append(["", "", "", f"fix: {c.fix}"])  # under its finding, one line of its own when piped
    return render(["status", "rule", "check", "detail"], rows)


def check_gpu(profile: Profile, target: GpuFacts, probe: GpuProbe) -> list[Check]:
    want = profile.hardware.gpus_per_node
    if target.arch == "cpu":
        seen = ", ".join(g.name for g in probe.gpus) or "none"
        return [Check("gpu", "ok", f"profile {profile.name} targets the CPU; GPUs seen: {seen}", GPUS_VISIBLE)]
    if not probe.gpus:
        return [Check("gpu", "fail", f"profile {profile.name} needs {want} {target.arch.upper()} GPU(s) "
                      f"({profile.hardware.gpu}); none found ({probe.error}). In a container, pass the GPUs "
                      f"(compose: deploy.resources.reservations.devices; docker run --gpus all)", GPUS_VISIBLE)]
    out = []
    wrong = [g for g in probe.gpus if g.compute_capability != target.compute_capability]
    if wrong:
        g = wrong[0]
        out.append(Check("gpu.arch", "fail",
                         f"GPU {g.index} is {g.name}, compute capability {g.compute_capability} ({g.sm.upper()}), "
                         f"driver {g.driver}; profile {profile.name} is built for {profile.hardware.gpu} "
                         f"({target.arch.upper()}, compute capability {target.compute_capability}): the image's "
                         f"kernels are compiled for SM120/SM121 only and the DeepSeek-V4 SM12x paths "
                         f"would not run. Choose a profile for this GPU, or run on SM12x hardware", GPU_ARCH))
    else:
        names = ", ".join(sorted({g.name for g in probe.gpus}))
        out.append(Check("gpu.arch", "ok", f"{len(probe.gpus)} x {names}, compute capability "
                         f"{target.compute_capability}, driver {probe.gpus[0].driver} (via {probe.source})", GPU_ARCH))
        if target.names and not any(n.lower() in g.name.lower() for g in probe.gpus for n in target.names):
            out.append(Check("gpu.model", "warn", f"{names} is {target.arch.upper()} but not a "
                             f"{profile.hardware.gpu}; memory figures of the profile may not hold", GPU_MODEL))
    if len(probe.gpus) < want:
        out.append(Check("gpu.count", "fail", f"profile {profile.name} uses {want} GPU(s) per node; "
                         f"{len(probe.gpus)} visible. Pass all of them to the container", GPUS_VISIBLE))
    return out


def check_memory(profile: Profile, target: GpuFacts, available: float | None,
                 kernel_log: str | list[str] | None, *, source: str = "MemAvailable",
                 device_free: tuple[float | None, str] | None = None) -> list[Check]:
    """K23 admission from the profile's own need, against MemAvailable (unified memory, CPU) or NVML's free
    device memory (discrete GPUs, `device_free`); then NVRM lines of this boot's kernel log (K24's signals)."""
    out = []
    if target.unified_memory or target.arch == "cpu":
        a = admit(profile, available, source)
        out.append(Check("memory", a.verdict, a.detail, a.rule, a.fix))
    else:
        host = "unreadable" if available is None else f"{available:.1f} GiB"
        out.append(Check("memory", "ok" if available is not None else "unknown",
                         f"host MemAvailable {host} ({source}); the engine's memory is on the GPU", "K23"))
        if device_free is not None:
            a = admit(profile, device_free[0], device_free[1])
            out.append(Check("memory.gpu", a.verdict, a.detail, a.rule, a.fix))
    if target.arch != "cpu":
        lines = kernel_log.splitlines() if isinstance(kernel_log, str) else kernel_log
        if lines is None:
            out.append(Check("kernel-log", "unknown", "kernel log not readable here: NVRM NV_ERR_NO_MEMORY and Xid "
                             "lines not checked (set APPLIANCE_KMSG to a readable kernel-log file)", "K24"))
        else:
            hits = kernel_hits(lines, load_kernel_checks())
            if hits:
                ids = sorted({h.signal.id for h in hits})
                out.append(Check("kernel-log", "warn", f"{len(hits)} line(s) this boot ({', '.join(ids)}), last: "
                                 f"{hits[-1].line.strip()[:160]}", hits[-1].signal.rule))
            else:
                out.append(Check("kernel-log", "ok", "no NVRM NV_ERR_NO_MEMORY or Xid line this boot", "K24"))
    return out


def check_stale_engine(profile: Profile, engines: list[tuple[int, str]], port_busy: bool | None,
                       api_port: int | None = None) -> list[Check]:
    """`port_busy` None: this rank serves no API (a headless worker), so the port is not its to check."""
    out = []
    if port_busy:
        out.append(Check("engine.port", "fail", f"port {api_port or api_port_of(profile)} is already in use; stop "
                         f"what holds it or set server.port", PORT_FREE))
    if engines:
        pid, cmd = engines[0]
        # On a GPU a second engine holds the memory this one needs; on the CPU target it only costs speed.
        status: CheckStatus = "warn" if profile.hardware.target == "cpu" else "fail"
        cost = "they compete for the CPU" if status == "warn" else "they hold GPU memory. Stop them first"
        out.append(Check("engine", status, f"{len(engines)} vLLM process(es) already running (pid {pid}: {cmd}); "
                         f"{cost}", NO_OTHER_ENGINE))
    return out or [Check("engine", "ok", "no vLLM engine running", NO_OTHER_ENGINE)]


def uses_rdma(profile: Profile) -> bool:
    """NCCL's IB/RoCE transport is in play: a multi-node GPU serve that does not disable IB (K10, K27, K35)."""
    return profile.hardware.target != "cpu" and profile.hardware.nodes > 1 and not profile.distributed.nccl_ib_disable


MEMLOCK_FIX = ("run the engine with an unlimited memlock: compose sets `ulimits: memlock: -1` (compose.yaml does); "
               "`docker run --ulimit memlock=-1`; on Kubernetes the container runtime's own limit applies to every "
               "container, so raise it there (containerd: LimitMEMLOCK=infinity in its systemd unit, then restart "
               "containerd; docs/kubernetes.md); on a bare host `ulimit -l unlimited` or memlock in "
               "/etc/security/limits.conf")


def check_memlock(profile: Profile, target: GpuFacts, limits: tuple[int | None, int | None]) -> list[Check]:
    """K27: RDMA registers (pins) NCCL's buffers with ibv_reg_mr, bounded by RLIMIT_MEMLOCK. IPC_LOCK does not lift
    it for the image's non-root user (a non-root process has no effective capabilities), so the limit the
    runtime hands the container is what NCCL gets. `limits`: (soft, hard) in bytes, None = unlimited."""
    if not uses_rdma(profile):
        return []
    soft, hard = limits
    if soft is None:
        return [Check("memlock", "ok", "memlock unlimited: NCCL can register its RDMA buffers", rule="K27")]
    need = int((target.memory_gib or 0) * profile.hardware.gpus_per_node * 1024**3)
    shown = f"{soft / 1024**2:,.0f} MiB" if soft >= 1024**2 else f"{soft:,} bytes"
    if need and soft >= need:
        return [Check("memlock", "ok", f"memlock {shown}: at least the node's GPU memory ({need / 1024**3:,.0f} GiB)",
                      rule="K27")]
    raise_to = "unlimited" if hard is None else f"unlimited (the hard limit is {hard:,} bytes: raise it too)"
    return [Check("memlock", "fail", f"memlock (ulimit -l) is {shown} on an RDMA profile: NCCL's ibv_reg_mr fails "
                  f"or hangs the IB handshake once pinned memory passes it; it must be {raise_to} or at least the "
                  f"node's GPU memory", rule="K27", fix=MEMLOCK_FIX)]


def check_kernel(profile: Profile, target: GpuFacts, release: str | None, cmdline: str | None) -> list[Check]:
    """K35: a multi-node serve over RoCE on a kernel release NCCL is reported to fail on, unless `kho=off`."""
    from fnmatch import fnmatchcase

    if not uses_rdma(profile) or not target.nccl_roce_bad_kernels:
        return []
    if not release:
        return [Check("kernel", "unknown", "the kernel release could not be read (sys/kernel/osrelease)", "K35")]
    bad = next((p for p in target.nccl_roce_bad_kernels if fnmatchcase(release, p)), None)
    kho_off = "kho=off" in (cmdline or "").split()
    if bad and not kho_off:
        return [Check("kernel", "fail",
                      f"kernel {release}: NCCL over RoCE is reported to fail on it at start-up (`ibv_reg_mr_iova2` "
                      f"... Cannot allocate memory) on {profile.hardware.gpu} hosts; the cause found is Kexec "
                      f"HandOver, on by default in this kernel", "K35",
                      "boot a kernel reported to work (6.17.0-1032-nvidia), or add kho=off to the kernel command "
                      "line and reboot (NVIDIA/NV-Kernels#591)")]
    detail = (f"kernel {release}{' with kho=off' if bad else ''}: not a release NCCL over RoCE is known to fail "
              f"on")
    return [Check("kernel", "ok", detail, "K35")]


def kernel_release(procfs: Path) -> tuple[str | None, str | None]:
    """(release, command line) from procfs: the host's kernel, also inside a container."""
    def read(rel: str) -> str | None:
        try:
            return (procfs / rel).read_text(errors="replace").strip() or None
        except OSError:
            return None

    return read("sys/kernel/osrelease"), read("cmdline")


def check_versions(profile: Profile, env: Mapping[str, str] | None = None, *,
                   lock: ChannelLock | None = None) -> list[Check]:
    """The installed stack against the profile's channel (`lock`: its lock, where the caller resolved it); in an
    image (APPLIANCE_CHANNEL set) that image's channel must be the profile's: another channel's engine would serve a
    profile its rules were not judged for."""
    from appliance.lock import (
        CHANNEL_ENV,
        ENGINE_RECORD,
        SKIPPED_RECORD,
        channel_lock,
        check,
        engine_source_drift,
        host_platform,
        image_record,
        read_skipped,
    )

    env = os.environ if env is None else env
    ch = lock or channel_lock(profile.engine.channel, profile.hardware.target)
    image = env.get(CHANNEL_ENV)
    if image and image != ch.name:
        return [Check("versions", "fail", f"this image is channel {image} but profile {profile.name} runs channel "
                                          f"{ch.name}: run the image of {ch.name} (appliance channels), or set "
                                          f"engine.channel: {image}", STACK_AS_LOCKED)]
    from appliance.channels.engines import engine_versions, find_engine

    engine = find_engine(ch, env)
    if engine is None:  # not on this host: one finding, this environment's drift from the channel as its parts
        return [_engine_missing(profile, ch, env)]
    platform = host_platform()
    skipped = read_skipped(image_record(SKIPPED_RECORD), platform) if ch.target == "gpu" else {}
    drifts = check(ch, engine_versions(engine, [p.name for p in ch.pins()]), skipped=skipped, platform=platform)
    if ch.target == "gpu" and ch.engine.source == "fork" and (
            record := engine_source_drift(ch, image_record(ENGINE_RECORD))) is not None:
        drifts.append(record)
    where = "" if engine.venv is None else f" (engine venv {engine.venv})"
    if not drifts:
        return [Check("versions", "ok", f"installed stack matches channel {ch.name} of versions.json{where}",
                      STACK_AS_LOCKED)]
    return [Check("versions", "fail", f"channel {ch.name}{where}: {d.message}", d.rule or STACK_AS_LOCKED)
            for d in drifts]


def _engine_missing(profile: Profile, ch: ChannelLock, env: Mapping[str, str]) -> Check:
    """The channel's engine is not here, so every locked package differing here is expected, not a finding of its
    own: one line (the drift as its parts, their rules named), and on a host without the image's channel the fix is
    to run the doctor where the serve runs."""
    from appliance.channels.engines import missing_engine
    from appliance.lock import CHANNEL_ENV, check

    missing = missing_engine(ch)
    drifts = check(ch)
    parts = tuple(Check("versions", "fail", f"channel {ch.name}: {d.message}", d.rule or STACK_AS_LOCKED)
                  for d in drifts)
    detail = missing.message
    if parts:
        rules = sorted(f"{d.rule} {d.package}" for d in drifts if d.rule)
        detail += (f"; {len(parts)} of its {len(ch.pins())} locked packages differ here too, as expected off the "
                   f"engine's own environment" + (f", {', '.join(rules)} among them" if rules else "")
                   + f" (each one: --json, or `appliance versions --check --channel {ch.name}`)")
    fix = missing.fix
    if ch.target == "gpu" and not env.get(CHANNEL_ENV):
        from appliance.lock import image_tag

        tag = image_tag(ch.name)
        fix = (f"this is a host, not the image: run the doctor inside the image, `docker run --rm --gpus all "
               f"--entrypoint appliance {tag} doctor {profile.name}` (compose: `docker compose run --rm "
               f"--entrypoint appliance SERVICE doctor`); {missing.fix}")
    return Check("versions", "fail", detail, STACK_AS_LOCKED, fix=fix, parts=parts)


def check_provable(found: Sequence[Any]) -> list[Check]:
    """Log expectations the profile's channel cannot prove on a DeepSeek-V4 serve (`found`: what
    appliance/health/provable.py's profile_unprovable gives; the command that runs the doctor asks it, since the
    preflight and the health readers never import each other): said, since /status will never wait for them."""
    if not found:
        return []
    names = ", ".join(f"{n.expectation} ({n.rule})" for n in found)
    parts = tuple(Check("health.provable", "warn", f"{n.expectation}: {n.detail}", n.rule) for n in found)
    return [Check("health.provable", "warn", f"not provable on channel {found[0].channel}: {names}; the serve "
                  f"reports them unknown and never waits for them", found[0].rule, parts=parts)]


def check_behind_front(profile: Profile, role: str, engine_port: int | None = None) -> list[Check]:
    """With the front (server.front) the engine listens on server.engine_port behind it: that port must be free too.
    `engine_port`: the resolved serve's (its placement's), else the profile's."""
    if not profile.server.front or role == "worker":
        return []
    port = engine_port or profile.server.behind_front_port
    if port_in_use(port):
        return [Check("engine.port", "fail", f"port {port} (server.engine_port: the engine's, behind the front) is "
                      f"already in use; stop what holds it or set server.engine_port", PORT_FREE)]
    return []


def run_doctor(profile: Profile, role: str = "single", *, procfs: Path | None = None,
               kmsg: Path | None = None, api_port: int | None = None, lock: ChannelLock | None = None,
               engine_port: int | None = None) -> list[Check]:
    """`procfs`/`kmsg`: APPLIANCE_PROCFS / APPLIANCE_KMSG (settings); defaults /proc and this boot's kernel log.
    `api_port`, `engine_port`, `lock`: the resolved serve's (`appliance run`), else the profile's."""
    target = load_catalogue().gpus[profile.hardware.gpu]
    port_busy = None if role == "worker" else port_in_use(api_port or api_port_of(profile))
    procfs = procfs or Path("/proc")
    kernel_log = kernel_log_this_boot(kmsg)[0] if target.arch != "cpu" else None
    device_free = None if target.arch == "cpu" or target.unified_memory else nvml_free_gib(profile.engine.extra_env)
    return [
        *check_gpu(profile, target, probe_gpus()),
        *check_memory(profile, target, mem_available_gib(procfs), kernel_log,
                      source=f"MemAvailable in {procfs}/meminfo", device_free=device_free),
        *check_stale_engine(profile, running_engines(), port_busy, api_port),
        *check_behind_front(profile, role, engine_port),
        *check_memlock(profile, target, memlock_limit()),
        *check_kernel(profile, target, *kernel_release(procfs)),
        *check_versions(profile, lock=lock),
    ]
