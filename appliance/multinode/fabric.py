"""Fabric qualification before launch (K25): prove the link before NCCL hangs on it.

Two parts:
- a fingerprint of what NCCL will use on this node, exchanged by the rendezvous (multinode/identity.py)
  and compared field by field: the sha256 of the libnccl file the engine will load (two builds that
  report the same version can be different binaries, and hang minutes in), the IB devices/HCAs with
  their port state and link layer (after NCCL_IB_HCA), and the fabric interface's MTU;
- a short transfer from each rank to the head over the engine's own backend (NCCL on GPUs, Gloo on the
  CPU build): round-trip latency of a small message and point-to-point bandwidth of `transfer_mib`,
  plus one all-reduce, compared with the profile's floor (`distributed.fabric`): refuse or warn.

The measurement runs in a child process (`python -m appliance.multinode.fabric measure ...`): the
entrypoint never imports torch, and a hung collective is ended by the child's timeout, not ours.
It uses the master port + 2 (the rendezvous has +1, the engine the port itself), closed before the
engine starts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance import port_holder
from appliance.bounds import QUALIFY_PORT_OFFSET
from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject, loads
from appliance.lock import NCCL_DISTRIBUTIONS
from appliance.multinode.fabric_report import (
    FabricReport,
    Floor,
    OnFail,
    Verdict,
    measured_figures,
    measured_links,
    unjudged,
)

if TYPE_CHECKING:
    from appliance.placement import ResolvedPlacement
    from appliance.profile.model import Profile
    from appliance.render.serveplan import ServePlan

RULE = "K25"
NONE = "none"
SYSFS = Path("/sys")
MEASURE_TIMEOUT_S = 120.0
K25_REASON = ("K25: a fabric that fell back to sockets, or nodes with different NCCL binaries, HCAs or MTU, make "
              "NCCL slow or hang minutes into the serve instead of failing at start")


# --- the fingerprint ------------------------------------------------------------------------------

def nccl_library_path(env: Mapping[str, str]) -> Path | None:
    """The libnccl the engine will load: VLLM_NCCL_SO_PATH, else the locked nvidia-nccl wheel's file."""
    if env.get("VLLM_NCCL_SO_PATH"):
        return Path(env["VLLM_NCCL_SO_PATH"])
    for name in NCCL_DISTRIBUTIONS:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name.startswith("libnccl.so"):
                return Path(str(f.locate()))
    return None


@cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def nccl_library_sha256(env: Mapping[str, str]) -> str:
    """sha256 of the libnccl file (not only its version string); `none` where no NCCL is installed (CPU)."""
    path = nccl_library_path(env)
    if path is None:
        return NONE
    try:
        st = path.stat()
        return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise ApplianceError(f"the NCCL library {path} cannot be read: {exc.strerror}", field="VLLM_NCCL_SO_PATH",
                             value=str(path), fix="point VLLM_NCCL_SO_PATH at a readable libnccl.so.2, or unset it",
                             reason=K25_REASON) from None


def ib_devices(env: Mapping[str, str], sysfs: Path = SYSFS) -> str:
    """The IB/RoCE devices NCCL may use here (after NCCL_IB_HCA's prefix filter), each port with its state and
    link layer: `mlx5_0/1:ACTIVE:Ethernet,...`; `none` without any (NCCL then uses sockets)."""
    root = sysfs / "class" / "infiniband"
    if env.get("NCCL_IB_DISABLE") == "1":
        return "disabled (NCCL_IB_DISABLE=1)"
    try:
        names = sorted(p.name for p in root.iterdir())
    except OSError:
        return NONE
    wanted = env.get("NCCL_IB_HCA", "")
    if wanted and not wanted.startswith("^"):
        prefixes = [w.strip().lstrip("=").split(":")[0] for w in wanted.split(",") if w.strip()]
        names = [n for n in names if any(n.startswith(p) for p in prefixes)]
    out = []
    for name in names:
        ports = root / name / "ports"
        for port in sorted(ports.iterdir()) if ports.is_dir() else []:
            state = _read(port / "state").split(":")[-1].strip() or "?"
            layer = _read(port / "link_layer").strip() or "?"
            out.append(f"{name}/{port.name}:{state}:{layer}")
    return ",".join(out) or NONE


def fabric_mtu(ifname: str | None, sysfs: Path = SYSFS) -> str:
    """The fabric interface's MTU, `none` when no interface is named (single host, tests)."""
    if not ifname:
        return NONE
    mtu = _read(sysfs / "class" / "net" / ifname / "mtu").strip()
    return mtu or f"unreadable ({ifname})"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# --- the measurement (child process) ------------------------------------------------------------------

def measure(rank: int, world: int, master: str, port: int, backend: str, nbytes: int, iters: int,
            timeout_s: float) -> JsonObject:
    """Run by every rank: ping-pong rank r <-> 0 for each worker r (latency: 8 bytes; bandwidth: nbytes), then
    one all-reduce of nbytes over all ranks. Times are medians over `iters` after warm-up."""
    import datetime as dt

    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    started = time.monotonic()
    dist.init_process_group(backend, init_method=f"tcp://{_host(master)}:{port}", rank=rank, world_size=world,
                            timeout=dt.timedelta(seconds=timeout_s))
    joined = time.monotonic() - started
    small = torch.ones(2, dtype=torch.float32, device=device)
    big = torch.ones(nbytes // 4, dtype=torch.float32, device=device)

    def pingpong(t: torch.Tensor, other: int) -> float:
        sync()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(t, other)
            dist.recv(t, other)
        else:
            dist.recv(t, other)
            dist.send(t, other)
        sync()
        return time.perf_counter() - t0

    peers: dict[str, dict[str, float]] = {}
    for worker in range(1, world):
        if rank not in (0, worker):
            continue
        other = worker if rank == 0 else 0
        for _ in range(3):
            pingpong(small, other)
            pingpong(big, other)
        lat = statistics.median(pingpong(small, other) for _ in range(iters * 5)) / 2
        one_way = statistics.median(pingpong(big, other) for _ in range(iters)) / 2
        peers[str(worker)] = {"latency_us": lat * 1e6, "bandwidth_gbps": nbytes / one_way / 1e9}
    dist.barrier()
    for _ in range(2):
        dist.all_reduce(big)
    sync()
    times = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter()
        dist.all_reduce(big)
        sync()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    busbw = 2 * (world - 1) / world * nbytes / t / 1e9
    info = {"rank": rank, "world": world, "backend": backend, "device": str(device), "transfer_bytes": nbytes,
            "iters": iters, "join_s": round(joined, 3), "peers": peers, "allreduce_busbw_gbps": busbw,
            "torch": torch.__version__}
    if backend == "nccl":
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["gpu"] = torch.cuda.get_device_name(device)
    dist.destroy_process_group()
    return info


def _host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr


# --- the verdict (entrypoint side) ------------------------------------------------------------------------

def judge(result: Mapping[str, Any], min_gbps: float | None, max_latency_us: float | None,
          on_fail: OnFail) -> FabricReport:
    """One rank's measurement (`measure`'s JSON) against the profile's floor; ValueError when it is no measurement."""
    links = measured_links(result)
    backend = str(result.get("backend"))
    problems = []
    for peer, m in sorted(links.items()):
        if min_gbps is not None and m.bandwidth_gbps < min_gbps:
            problems.append(f"{RULE} rank {peer} <-> head: {m.bandwidth_gbps:.2f} GB/s over {backend} "
                            f"is under the profile's floor {min_gbps:g} GB/s")
        if max_latency_us is not None and m.latency_us > max_latency_us:
            problems.append(f"{RULE} rank {peer} <-> head: latency {m.latency_us:.0f} us over {backend} "
                            f"exceeds the profile's {max_latency_us:g} us")
    verdict: Verdict = "pass" if not problems else "fail" if on_fail == "refuse" else "warn"
    return FabricReport(rule=RULE, verdict=verdict, problems=tuple(problems),
                        floor=Floor(min_gbps, max_latency_us, on_fail), peers=links, **measured_figures(result),
                        extra=unjudged(result))


def qualify(*, rank: int, world: int, master_addr: str, port: int, backend: str, transfer_mib: int,
            min_gbps: float | None, max_latency_us: float | None, on_fail: OnFail, env: Mapping[str, str],
            iters: int = 5, timeout_s: float = MEASURE_TIMEOUT_S) -> FabricReport:
    """Measure this rank's link to the head in a child process and judge it; raises ApplianceError (exit 2)
    when the profile refuses below its floor, or when the measurement cannot run at all."""
    argv = [sys.executable, "-m", "appliance.multinode.fabric", "measure", "--rank", str(rank), "--world",
            str(world), "--master", master_addr, "--port", str(port), "--backend", backend, "--bytes",
            str(transfer_mib * 1024 * 1024), "--iters", str(iters), "--timeout", str(timeout_s)]
    where = f"{master_addr}:{port} over {backend}"
    try:
        done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=timeout_s + 30, check=False)
    except subprocess.TimeoutExpired:
        raise _cannot(f"rank {rank}'s fabric measurement with the head at {where} did not finish in "
                      f"{timeout_s + 30:g} s", master_addr, port) from None
    if done.stderr:  # the backend's own account (NCCL_DEBUG=INFO: the transport it chose) stays visible
        sys.stderr.write(done.stderr)
    result = None
    for line in done.stdout.splitlines():  # NCCL_DEBUG writes to stdout too: keep our line, pass the rest on
        try:
            parsed = loads(line, "the measurement's output")
        except ValueError:  # JsonError too: a line of the backend's own output
            parsed = None
        if isinstance(parsed, dict) and "peers" in parsed:
            result = parsed
        else:
            sys.stderr.write(line + "\n")
    if done.returncode != 0 or not isinstance(result, dict):
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        if rank == 0 and ("EADDRINUSE" in done.stderr or "address already in use" in done.stderr.lower()):
            tail += f"; {port_holder.describe(port)}"  # the head's store could not listen: say who has the port
        raise _cannot(f"rank {rank}'s fabric measurement with the head at {where} failed (exit {done.returncode}): "
                      f"{tail}", master_addr, port)
    try:
        report = judge(result, min_gbps, max_latency_us, on_fail)
    except ValueError as exc:
        raise _cannot(f"rank {rank}'s fabric measurement with the head at {where} is malformed: {exc}",
                      master_addr, port) from None
    if report.verdict == "fail":
        raise ApplianceError(
            "fabric qualification refused the serve: " + "; ".join(report.problems),
            field="distributed.fabric.min_bandwidth_gbps", value=min_gbps,
            fix="check that NCCL uses the RDMA fabric (NCCL_DEBUG=INFO shows `Using network IB`, not Socket), the "
                "HCA (distributed.nccl_ib_hca), cabling and MTU; or set distributed.fabric.on_fail: warn",
            reason=K25_REASON)
    return report


def _cannot(message: str, master_addr: str, port: int) -> ApplianceError:
    return ApplianceError(message, field="APPLIANCE_MASTER_ADDR", value=master_addr,
                          fix=f"check that port {port} (master port + {QUALIFY_PORT_OFFSET}) is reachable on the "
                              f"fabric from every rank, and that every rank started", reason=K25_REASON)


def qualify_for(profile: Profile, plan: ServePlan, placement: ResolvedPlacement) -> FabricReport:
    """`appliance run`'s call after the rendezvous: this rank's qualification with the profile's floor."""
    fabric = profile.distributed.fabric
    assert placement.master_addr is not None  # a multi-node placement: build_plan refused it without one
    return qualify(rank=placement.node_rank, world=profile.hardware.nodes, master_addr=placement.master_addr,
                   port=placement.qualify_port, backend="nccl" if profile.hardware.target == "gpu" else "gloo",
                   transfer_mib=fabric.transfer_mib, min_gbps=fabric.min_bandwidth_gbps,
                   max_latency_us=fabric.max_latency_us, on_fail=fabric.on_fail, env=plan.env)


# --- metrics --------------------------------------------------------------------------------------------

def qualify_here(world: int, master: str, port: int, backend: str, transfer_mib: int, iters: int,
                 min_gbps: float | None, max_latency_us: float | None, on_fail: OnFail) -> list[JsonObject]:
    """Every rank of a qualification on this one host (each its own child process, as `appliance run` does):
    for the CPU test between two loopback addresses, and for two GPUs of one host (NVLink, not a fabric)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(rank: int) -> JsonObject:
        env = {"LOCAL_RANK": str(rank)}
        try:
            return qualify(rank=rank, world=world, master_addr=master, port=port, backend=backend,
                           transfer_mib=transfer_mib, min_gbps=min_gbps, max_latency_us=max_latency_us,
                           on_fail=on_fail, env=env, iters=iters).to_json()
        except ApplianceError as exc:
            return {"rank": rank, "verdict": "refused", "error": str(exc)}

    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(one, range(world)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m appliance.multinode.fabric")
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("here", help="qualify every rank on this host (loopback or the GPUs of one host); JSON lines")
    h.add_argument("--world", type=int, default=2)
    h.add_argument("--master", default="127.0.0.1")
    h.add_argument("--port", type=int, default=29613)
    h.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    h.add_argument("--mib", type=int, default=64)
    h.add_argument("--iters", type=int, default=5)
    h.add_argument("--min-gbps", type=float)
    h.add_argument("--max-latency-us", type=float)
    h.add_argument("--on-fail", choices=["refuse", "warn"], default="refuse")
    m = sub.add_parser("measure", help="one rank's side of the qualification transfer; prints JSON")
    m.add_argument("--rank", type=int, required=True)
    m.add_argument("--world", type=int, required=True)
    m.add_argument("--master", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--backend", choices=["gloo", "nccl"], required=True)
    m.add_argument("--bytes", type=int, default=64 << 20)
    m.add_argument("--iters", type=int, default=5)
    m.add_argument("--timeout", type=float, default=MEASURE_TIMEOUT_S)
    args = ap.parse_args(argv)
    if args.cmd == "here":
        reports = qualify_here(args.world, args.master, args.port, args.backend, args.mib, args.iters, args.min_gbps,
                               args.max_latency_us, args.on_fail)
        for report in reports:
            print(json.dumps(report), flush=True)
        return 0 if all(r["verdict"] != "refused" for r in reports) else 1
    print(json.dumps(measure(args.rank, args.world, args.master, args.port, args.backend, args.bytes, args.iters,
                             args.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
