"""What every check needs to know about the serve it is run against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from appliance.gate.progress import Progress
from appliance.gate.sizing import GateParams
from appliance.profile.model import Profile

if TYPE_CHECKING:
    from appliance.gate.battery.run_context import BatteryRun
    from appliance.gate.protocol import ProtocolRun


@dataclass(frozen=True)
class GateContext:
    url: str
    """The serve's base URL (vLLM's API server, without /v1)."""
    model: str
    """The served model name requests use."""
    checkpoint: str
    tokenizer: str | None
    """A local folder with the checkpoint's tokenizer (llama-benchy, lm-eval); None = the checkpoint id."""
    profile: Profile
    params: GateParams
    out_dir: Path
    progress: Progress
    transport: httpx.AsyncBaseTransport | None = None
    """Tests hand in a fake serve here; None = the network."""
    battery: BatteryRun | None = None
    """Set for `gate --battery NAME`: the battery's arm, settings and reference."""
    bench_protocol: ProtocolRun | None = None
    """Set for `gate --bench-protocol NAME`: the bench check runs that anchor protocol's planned shapes."""
