"""What a battery run knows beside the gate's context: which battery, which arm, its settings, the exporter that
reads the serve's log back, and the reference C10 compares with."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.gate.battery.definition import Arm, Battery
from appliance.gate.battery.sizing import BatteryParams


@dataclass(frozen=True)
class BatteryRun:
    battery: Battery
    arm: Arm
    params: BatteryParams
    exporter: str | None
    """The health exporter: the log-read facts C2-C4, D1 and D2 judge (the harness greps the head's log)."""
    reference: float | None
    """C10's reference t/s at params.bench_row; None = none known for this hardware."""
    reference_source: str
    unguarded_channel: str | None = None
    """The noguard arm on a channel whose engine has no same-step guard: that channel's name (D2 says why it
    cannot pass); None elsewhere."""
    arm_sets: tuple[str, ...] = ()
    """The default arm only: engine switches this serve renders that the harness's default arm leaves unset
    (VAR=value); the receipt names them. Empty = nothing set, as the harness runs it."""
