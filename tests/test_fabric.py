"""K25 fabric qualification on real processes: two ranks measure their link over torch.distributed's Gloo (the
CPU build's backend; NCCL on GPUs, measured on 2 x H200 in docs/evidence/fabric-h200x2/), and the rendezvous
compares each rank's NCCL library file, IB devices and fabric MTU, naming both values of any difference."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import pytest

from appliance.multinode.fabric import fabric_mtu, ib_devices, judge, nccl_library_sha256, qualify_here
from appliance.multinode.fabric_report import FabricReport, PeerLink
from tests.test_multinode_rendezvous import master_port, start_rank


def test_two_ranks_qualify_over_gloo_between_two_loopback_addresses(vllm_engine: Path) -> None:
    # Gloo is torch.distributed's: torch comes with the engine.
    reports = qualify_here(2, "127.0.0.2", master_port(), "gloo", 8, 3, min_gbps=0.001, max_latency_us=None,
                           on_fail="refuse")
    assert [r["verdict"] for r in reports] == ["pass", "pass"], reports
    for r in reports:
        assert r["rule"] == "K25" and r["backend"] == "gloo" and r["transfer_bytes"] == 8 << 20
        link = r["peers"]["1"]
        assert link["bandwidth_gbps"] > 0.001 and link["latency_us"] > 0
        assert r["allreduce_busbw_gbps"] > 0


def test_a_floor_the_link_cannot_give_refuses_on_both_ranks_naming_both_figures(vllm_engine: Path) -> None:
    reports = qualify_here(2, "127.0.0.1", master_port(), "gloo", 4, 2, min_gbps=10_000, max_latency_us=None,
                           on_fail="refuse")
    assert [r["verdict"] for r in reports] == ["refused", "refused"]
    for r in reports:
        assert "K25 rank 1 <-> head:" in r["error"] and "GB/s over gloo is under the profile's floor 10000 GB/s" \
            in r["error"]
        assert "fix:" in r["error"] and "Using network IB" in r["error"]


MEASURED = {"rank": 0, "world": 2, "backend": "nccl", "device": "cuda:0", "transfer_bytes": 64 << 20, "iters": 5,
            "join_s": 0.4, "peers": {"1": {"bandwidth_gbps": 4.13, "latency_us": 350.0}},
            "allreduce_busbw_gbps": 3.9, "torch": "2.13.0", "nccl": "2.30.7", "gpu": "NVIDIA GB10"}


def test_warn_mode_keeps_the_problem_and_lets_the_serve_start() -> None:
    report = judge(MEASURED, 8, 200, "warn")
    assert report.verdict == "warn"
    assert report.problems == ("K25 rank 1 <-> head: 4.13 GB/s over nccl is under the profile's floor 8 GB/s",
                               "K25 rank 1 <-> head: latency 350 us over nccl exceeds the profile's 200 us")
    assert judge(MEASURED, 2, None, "refuse").verdict == "pass"


def test_the_report_is_a_frozen_type_that_round_trips_and_refuses_what_is_no_report() -> None:
    """launch.json carries it to the exporter: what comes back is what was measured, typed; a broken one is named."""
    report = judge(MEASURED | {"ib_devices": "mlx5_0/1:ACTIVE:Ethernet"}, 2, 500, "refuse")
    again = FabricReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again == report and again.peers["1"] == PeerLink(latency_us=350.0, bandwidth_gbps=4.13)
    assert again.extra == {"ib_devices": "mlx5_0/1:ACTIVE:Ethernet"}  # a figure a newer measurement adds is kept
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.verdict = "fail"  # type: ignore[misc]
    for broken, needle in (({**report.to_json(), "verdict": "great"}, "verdict"),
                           ({**report.to_json(), "peers": {"1": {"latency_us": "fast"}}}, "latency_us"),
                           ({**report.to_json(), "join_s": float("nan")}, "join_s"),
                           ([], "JSON object")):
        with pytest.raises(ValueError, match=needle):
            FabricReport.from_json(broken)


def fake_sysfs(root: Path) -> Path:
    for dev, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        port = root / "class" / "infiniband" / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "link_layer").write_text("Ethernet\n")
    net = root / "class" / "net" / "enp1s0f1np1"
    net.mkdir(parents=True)
    (net / "mtu").write_text("9000\n")
    return root


def test_the_fingerprint_reads_hcas_after_nccl_ib_hca_and_the_fabric_mtu(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path / "sys")
    assert ib_devices({}, sysfs) == "mlx5_0/1:ACTIVE:Ethernet,mlx5_1/1:DOWN:Ethernet"
    assert ib_devices({"NCCL_IB_HCA": "mlx5_0"}, sysfs) == "mlx5_0/1:ACTIVE:Ethernet"
    assert ib_devices({"NCCL_IB_DISABLE": "1"}, sysfs).startswith("disabled")
    assert ib_devices({}, tmp_path / "nothing") == "none"
    assert fabric_mtu("enp1s0f1np1", sysfs) == "9000"
    assert fabric_mtu(None, sysfs) == "none"
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(b"not really nccl")
    assert nccl_library_sha256({"VLLM_NCCL_SO_PATH": str(lib)}) == hashlib.sha256(b"not really nccl").hexdigest()


def nccl_wheel_with_library(site: Path, version: str, library: bytes) -> Path:
    """A site dir holding nvidia-nccl-cu13 VERSION as pip leaves it: dist-info, RECORD, the library file."""
    info = site / f"nvidia_nccl_cu13-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: {version}\n")
    lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(library)
    (info / "RECORD").write_text(f"nvidia/nccl/lib/libnccl.so.2,,{len(library)}\n{info.name}/METADATA,,\n")
    return site


def with_site(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_two_nccl_builds_with_one_version_string_are_refused_naming_both_hashes(tmp_path: Path) -> None:
    head_site = nccl_wheel_with_library(tmp_path / "head", "2.30.7", b"build A")
    worker_site = nccl_wheel_with_library(tmp_path / "worker", "2.30.7", b"build B, same version")
    port = master_port()
    worker = start_rank(1, port, 60, with_site(worker_site))
    head = start_rank(0, port, 60, with_site(head_site))
    (h_rc, h_out, h_err), (w_rc, w_out, w_err) = head.result(), worker.result()
    a, b = hashlib.sha256(b"build A").hexdigest(), hashlib.sha256(b"build B, same version").hexdigest()
    assert (h_rc, w_rc) == (2, 2), h_err + w_err
    for err in (h_err, w_err):
        assert f"nccl_library_sha256: head {a}, rank 1 {b}" in err
        assert "nccl_version" not in err.split("serve refused")[1].split("\n")[0]  # the versions agreed
        assert "Traceback" not in err
    assert "agrees" not in h_out + w_out


def test_a_different_fabric_mtu_is_refused_naming_both_values() -> None:
    port = master_port()
    worker = start_rank(1, port, 60, {"APPLIANCE_FABRIC_IFNAME": "lo"})
    head = start_rank(0, port, 60)
    (h_rc, _, h_err), (w_rc, _, w_err) = head.result(), worker.result()
    mtu = Path("/sys/class/net/lo/mtu").read_text().strip()
    assert (h_rc, w_rc) == (2, 2)
    for err in (h_err, w_err):
        assert f"fabric_mtu: head none, rank 1 {mtu}" in err


def test_real_nccl_and_gloo_reports_read_as_the_typed_report_and_write_back_the_same() -> None:
    """The reports measured on 2 x H200 over NCCL (docs/evidence/fabric-h200x2/) and by two `appliance run` ranks over
    Gloo (docs/evidence/gemma-tp2-2node/): what launch.json hands the exporter is exactly what was measured."""
    evidence = Path(__file__).resolve().parents[1] / "docs" / "evidence"
    lines = [json.loads(line) for name in ("nccl-nvlink-64MiB.jsonl", "nccl-nvlink-1GiB.jsonl")
             for line in (evidence / "fabric-h200x2" / name).read_text().splitlines() if line.startswith("{")]
    reports = [r for r in lines if "peers" in r]
    reports.append(json.loads((evidence / "gemma-tp2-2node" / "head-status.json").read_text())["fabric"])
    assert len(reports) >= 3 and {r["backend"] for r in reports} == {"nccl", "gloo"}
    for data in reports:
        report = FabricReport.from_json(data)
        assert report.to_json() == data
        assert report.nccl == data.get("nccl")
        assert report.peers["1"].bandwidth_gbps == data["peers"]["1"]["bandwidth_gbps"]
