"""The fabric qualification's result (K25) as a frozen type: made by `fabric.judge` from one rank's measurement,
carried in launch.json's exporter section to that rank's exporter (/status `fabric`, the fabric metrics).

Standard library only: run/launchfile.py reads it without pydantic or torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from appliance.jsonstrict import JsonObject

Verdict = Literal["pass", "warn", "fail"]
VERDICTS: tuple[Verdict, ...] = ("pass", "warn", "fail")
OnFail = Literal["refuse", "warn"]


@dataclass(frozen=True)
class PeerLink:
    """This rank <-> the head (on the head: each worker <-> the head), medians after warm-up."""

    latency_us: float
    """Small-message round trip / 2."""
    bandwidth_gbps: float
    """Point-to-point, GB/s (10^9 bytes)."""


@dataclass(frozen=True)
class Floor:
    """The profile's `distributed.fabric` floor the links were judged against."""

    min_bandwidth_gbps: float | None
    max_latency_us: float | None
    on_fail: OnFail


@dataclass(frozen=True)
class FabricReport:
    rule: str
    verdict: Verdict
    problems: tuple[str, ...]
    floor: Floor
    rank: int
    world: int
    backend: str
    """nccl on GPUs, gloo on the CPU build: the engine's own."""
    peers: Mapping[str, PeerLink]
    """Worker rank (as text, the JSON key) -> its link to the head."""
    transfer_bytes: int
    iters: int
    join_s: float
    device: str = ""
    allreduce_busbw_gbps: float | None = None
    torch: str = ""
    nccl: str | None = None
    gpu: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """Any other figure a newer measurement reports: kept and shown, never judged."""

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "rule": self.rule, "verdict": self.verdict, "problems": list(self.problems),
            "floor": {"min_bandwidth_gbps": self.floor.min_bandwidth_gbps, "max_latency_us": self.floor.max_latency_us,
                      "on_fail": self.floor.on_fail},
            "rank": self.rank, "world": self.world, "backend": self.backend, "device": self.device,
            "transfer_bytes": self.transfer_bytes, "iters": self.iters, "join_s": self.join_s,
            "peers": {r: {"latency_us": p.latency_us, "bandwidth_gbps": p.bandwidth_gbps}
                      for r, p in sorted(self.peers.items())},
            "allreduce_busbw_gbps": self.allreduce_busbw_gbps, "torch": self.torch,
        }
        out |= {k: v for k, v in (("nccl", self.nccl), ("gpu", self.gpu)) if v is not None}
        return out | dict(self.extra)

    @classmethod
    def from_json(cls, data: object) -> FabricReport:
        """A report as `to_json` wrote it; ValueError naming the first field that is not."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a fabric report is a JSON object, not {type(data).__name__}")
        floor = _mapping(data, "floor")
        on_fail = floor.get("on_fail")
        if on_fail not in ("refuse", "warn"):
            raise ValueError(f"floor.on_fail is {on_fail!r}, not refuse or warn")
        verdict = data.get("verdict")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict is {verdict!r}, not one of {', '.join(VERDICTS)}")
        problems = data.get("problems")
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            raise ValueError("problems is not a list of text")
        return cls(
            rule=_text(data, "rule"), verdict=verdict, problems=tuple(problems),
            floor=Floor(_number(floor, "min_bandwidth_gbps", optional=True),
                        _number(floor, "max_latency_us", optional=True), on_fail),
            peers=measured_links(data), **measured_figures(data), extra=unjudged(data))


_FIELDS = ("rule", "rank", "world", "backend", "device", "transfer_bytes", "iters", "join_s", "allreduce_busbw_gbps",
           "torch", "nccl", "gpu")


def unjudged(data: Mapping[str, Any]) -> JsonObject:
    """What a report holds beyond the fields this type knows: kept as it is."""
    known = {*_FIELDS, "floor", "verdict", "problems", "peers"}
    return {k: v for k, v in data.items() if k not in known}


def measured_links(data: Mapping[str, Any]) -> dict[str, PeerLink]:
    peers = _mapping(data, "peers")
    out = {}
    for rank, link in peers.items():
        if not isinstance(link, Mapping):
            raise ValueError(f"peers.{rank} is not an object")
        latency, bandwidth = _number(link, "latency_us"), _number(link, "bandwidth_gbps")
        assert latency is not None and bandwidth is not None
        out[str(rank)] = PeerLink(latency, bandwidth)
    return out


def measured_figures(data: Mapping[str, Any]) -> JsonObject:
    """The figures of one rank's measurement (`fabric.measure`'s JSON), checked field by field."""
    return {"rank": _int(data, "rank"), "world": _int(data, "world"), "backend": _text(data, "backend"),
            "device": _text(data, "device", optional=True) or "", "transfer_bytes": _int(data, "transfer_bytes"),
            "iters": _int(data, "iters"), "join_s": _number(data, "join_s"),
            "allreduce_busbw_gbps": _number(data, "allreduce_busbw_gbps", optional=True),
            "torch": _text(data, "torch", optional=True) or "", "nccl": _text(data, "nccl", optional=True),
            "gpu": _text(data, "gpu", optional=True)}


def _mapping(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} is missing or not an object")
    return value


def _text(data: Mapping[str, Any], name: str, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} is {value!r}, not text")
    return value


def _int(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} is {value!r}, not a count")
    return value


def _number(data: Mapping[str, Any], name: str, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} is {value!r}, not a finite non-negative number")
    return float(value)
