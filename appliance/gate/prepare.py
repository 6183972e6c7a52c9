"""From command-line choices to a GateContext and the receipt's provenance, before any check runs.

Bad input (no profile, no serve at the URL, unknown check names) is an ApplianceError: exit 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ApplianceError
from appliance.gate.client import ServeError
from appliance.gate.context import GateContext
from appliance.gate.progress import Progress
from appliance.gate.provenance import engagement, engine_info, exporter_status, hardware, image_labels, served_digest
from appliance.gate.recall import NAMES
from appliance.gate.receipt import SCHEMA, build
from appliance.gate.receipt_model import Receipt
from appliance.gate.result import utc_now
from appliance.gate.sizing import CHECKS, DEFAULT_CHECKS, GateParams, params_for
from appliance.jsonstrict import JsonObject
from appliance.profile.loader import LoadedProfile

if TYPE_CHECKING:
    from appliance.health.monitor import StatusJson


@dataclass(frozen=True)
class GateRequest:
    url: str | None = None
    exporter: str | None = None
    profile: str | None = None
    overrides: list[str] = field(default_factory=list)
    env_overrides: list[str] = field(default_factory=list)
    checks: str | None = None
    out: Path | None = None
    tokenizer: str | None = None
    model_dir: Path | None = None
    tune: dict[str, str | int | float | None] = field(default_factory=dict)
    """Single-value overrides: bench_corpus, bench_runs, recall_concurrency, recall_min, gsm8k_* (see TUNABLE)."""
    battery: str | None = None
    """`--battery NAME`: run that battery's checks of `arm` instead of --checks."""
    arm: str = "default"
    bench_reference: Path | None = None
    bench_protocol: str | None = None
    """`--bench-protocol NAME`: the bench check runs an anchor's published shapes (gate/protocol.py)."""
    active: Any = True
    """The profile's upgrade layer (profile loader's `active`): an upgrade's candidate gates with its own record."""


TUNABLE = ("bench_corpus", "bench_runs", "recall_concurrency", "recall_min", "recall_runs", "gsm8k_limit",
           "gsm8k_fewshot", "gsm8k_task", "gsm8k_include", "gsm8k_runs")


def select(checks: str | None) -> list[str]:
    if not checks:
        return list(DEFAULT_CHECKS)
    names = [c.strip() for c in checks.split(",") if c.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown or not names:
        raise ApplianceError(f"unknown check(s) {', '.join(unknown) or '(none given)'}", field="--checks",
                             value=checks, fix=f"choose from {', '.join(CHECKS)}, comma-separated")
    return list(dict.fromkeys(names))


def tune(params: GateParams, t: dict[str, str | int | float | None]) -> GateParams:
    """Single values from the command line; none of them changes what `fit` already clipped."""
    bench, recall, gsm = params.bench, params.recall, params.gsm8k
    if t.get("bench_corpus"):
        corpus = t["bench_corpus"]
        if corpus not in ("builtin", "default") and not Path(corpus).is_file():
            raise ApplianceError(f"--bench-corpus {corpus}: no such file", field="--bench-corpus", value=corpus,
                                 fix="give `builtin`, `default` or the path of a text file")
        bench = replace(bench, corpus=corpus)
    if t.get("bench_runs"):
        bench = replace(bench, runs=t["bench_runs"])
    if t.get("recall_concurrency"):
        c = t["recall_concurrency"]
        if c * recall.needles_per_request > len(NAMES):
            raise ApplianceError(f"--recall-concurrency {c}: at most {len(NAMES) // recall.needles_per_request}",
                                 field="--recall-concurrency", value=c, fix=f"one name per needle; {len(NAMES)} names")
        recall = replace(recall, concurrency=c)
    if t.get("recall_min") is not None:
        recall = replace(recall, min_found=t["recall_min"], poisoned_max=min(recall.poisoned_max, t["recall_min"]))
    if t.get("recall_runs"):
        recall = replace(recall, runs=t["recall_runs"])
    if t.get("gsm8k_include"):
        if not Path(t["gsm8k_include"]).is_dir():
            raise ApplianceError(f"--gsm8k-include {t['gsm8k_include']}: no such folder", field="--gsm8k-include",
                                 value=t["gsm8k_include"], fix="give a folder of lm-eval task YAML files")
        gsm = replace(gsm, include_path=str(Path(t["gsm8k_include"]).resolve()))
    gsm = replace(gsm, limit=t.get("gsm8k_limit") or gsm.limit, task=t.get("gsm8k_task") or gsm.task)
    if t.get("gsm8k_fewshot") is not None:
        gsm = replace(gsm, num_fewshot=t["gsm8k_fewshot"])
    if t.get("gsm8k_runs"):
        gsm = replace(gsm, runs=t["gsm8k_runs"])
    return replace(params, bench=bench, recall=recall, gsm8k=gsm)


def _load(req: GateRequest, exporter_url: str) -> tuple[LoadedProfile, StatusJson | None]:
    """The profile, and the exporter's /status when it had to be asked for the profile's name."""
    from appliance.profile.loader import load_profile

    name, status, why = req.profile, None, ""
    if not name:  # ask the running serve which profile it runs
        status, error = exporter_status(exporter_url)
        profile = (status or {}).get("profile")
        name = profile.get("name") if isinstance(profile, dict) and isinstance(profile.get("name"), str) else None
        why = error or "its /status names no profile"
    if not name:
        raise ApplianceError(f"no profile given and none could be read from the health exporter at {exporter_url} "
                             f"({why})", field="--profile",
                             fix="pass --profile NAME (or set APPLIANCE_PROFILE), or point --exporter at the serve's")
    return load_profile(name, env_overrides=req.env_overrides, cli_overrides=req.overrides, active=req.active), status


def _tokenizer(req: GateRequest, loaded: LoadedProfile, engine: JsonObject) -> str | None:
    """A local folder holding the tokenizer: --tokenizer, the checkpoint on disk, or the folder vLLM serves."""
    from appliance.run.model_location import locate
    from appliance.weights.pins import revision_for

    if req.tokenizer:
        return req.tokenizer
    m = loaded.profile.model
    try:
        found = locate(m.checkpoint, revision_for(m.checkpoint, m.revision), req.model_dir, deep=False)
    except ApplianceError:
        found = None
    if found:
        return str(found.folder)
    root = next((x.get("root") for x in engine["models"] if x.get("root")), None)
    return root if root and Path(root).is_dir() else None


def prepare(req: GateRequest, progress: Progress) -> tuple[GateContext, list[str], Receipt]:
    from appliance import __version__
    from appliance.lock import channel_lock
    from appliance.paths import appliance_home, make_dir
    from appliance.placement import Placement
    from appliance.profile.model import DEFAULT_HEALTH_PORT
    from appliance.serve.resolve import placement
    from appliance.settings import load_settings

    settings = load_settings()
    if req.battery and req.checks:
        raise ApplianceError("--battery and --checks both given", field="--checks", value=req.checks,
                             fix="a battery runs its own checks: drop --checks, or drop --battery")
    selected = select(req.checks)
    default_exporter = f"http://127.0.0.1:{settings.health_port or DEFAULT_HEALTH_PORT}"  # before a profile is known
    asked = (req.exporter or default_exporter).rstrip("/")
    loaded, first_status = _load(req, asked)
    profile = loaded.profile
    if req.battery:  # bad input is refused before the serve is asked anything
        from appliance.gate.battery.prepare import battery_for, check_arm

        battery_for(req.battery)
        check_arm(profile, req.arm)
    protocol = None
    if req.bench_protocol:
        from appliance.gate.protocol import for_request

        selected, protocol = for_request(req.bench_protocol, req.battery, req.checks, selected, profile,
                                         tune(params_for(profile), req.tune).bench, req.tune.get("bench_runs"))
    # This node's ports as `appliance run` resolved them (APPLIANCE_HEALTH_PORT over the profile's).
    here = placement(profile, Placement(health_port=settings.health_port,
                                        origins={"health_port": "env:APPLIANCE_HEALTH_PORT"}))
    url = (req.url or f"http://127.0.0.1:{here.api_port}").rstrip("/")
    exporter = (req.exporter or f"http://127.0.0.1:{here.health_port}").rstrip("/")
    try:
        engine = engine_info(url)
    except ServeError as exc:
        raise ApplianceError(f"no serve answers at {url}: {exc}", field="--url", value=url,
                             fix="start one (appliance run) or point --url at its API server") from None
    served = [m["id"] for m in engine["models"] if m.get("id")]
    if not served:
        raise ApplianceError(f"{url}/v1/models lists no model", field="--url", value=url)
    name = profile.server.served_model_name
    model = name if name and name in served else served[0]
    status, status_error = (first_status, None) if first_status and exporter == asked else exporter_status(exporter)
    served_profile = served_digest(status)
    params = tune(params_for(profile), req.tune)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir = req.out or appliance_home() / "receipts" / f"{profile.name}-{stamp}"
    make_dir(out_dir, "--out" if req.out else "APPLIANCE_HOME")
    run = None
    if req.battery:
        from appliance.gate.battery.prepare import battery_run, check_same_serve

        run = battery_run(req.battery, req.arm, profile, params, exporter, req.bench_reference)
        check_same_serve(served_profile, loaded.digest)
        selected = [c.id for c in run.battery.of_arm(run.arm)]
    ctx = GateContext(url=url, model=model, checkpoint=profile.model.checkpoint,
                      tokenizer=_tokenizer(req, loaded, engine), profile=profile, params=params, out_dir=out_dir,
                      progress=progress, battery=run, bench_protocol=protocol)
    eng = engagement(status, status_error)
    channel = channel_lock(profile.engine.channel, profile.hardware.target)
    lock = channel.digest
    image, warnings = image_labels(), _warnings(eng, served_profile, loaded.digest, lock, params, channel.name)
    data: JsonObject = {  # the first write, validated by build() below
        "schema": SCHEMA, "complete": False, "verdict": "incomplete", "started_at": utc_now(), "finished_at": None,
        "selected": selected, "size": params.size,
        "target": {"url": url, "exporter": exporter, "model": model, "checkpoint": ctx.checkpoint,
                   "tokenizer": ctx.tokenizer},
        "provenance": {
            "appliance_version": __version__, "channel": channel.name, "lock_digest": lock,
            "profile": {"name": profile.name, "digest": loaded.digest, "source": str(loaded.source),
                        "overrides": [*req.env_overrides, *req.overrides]},
            "engine": engine, "image": image, "hardware": hardware(profile),
        },
        "engagement": eng, "checks": [], "warnings": warnings,
    }
    if protocol is not None:
        from appliance.gate.protocol import warnings as protocol_warnings

        data["bench_protocol"] = protocol.section()
        data["warnings"] += protocol_warnings(protocol, profile)
    if run is not None:
        from appliance.gate.battery.prepare import receipt_section

        data["size"] = run.params.size
        data["battery"] = receipt_section(run, channel, image)
        if run.params.size == "standard" and profile.limits.max_model_len < 131072:
            warnings.append(
                f"the seed ran this battery at max_model_len 131072; this serve has {profile.limits.max_model_len}: "
                f"C9's 2850-line rows (~77k tokens) exceed it and fail as the harness counts them (serve with "
                f"--set limits.max_model_len=131072 to run the seed's shape)")
    return ctx, selected, build(data)


def _warnings(eng: JsonObject, served: str | None, digest: str, lock: str, params: GateParams,
              channel: str = "") -> list[str]:
    out = list(params.notes)
    if not eng.get("available"):
        out.append(f"engagement facts not read: the health exporter did not answer ({eng.get('error')})")
        return out
    if served and served != digest:
        out.append(f"the serve runs profile digest {served[:12]}, the gate loaded {digest[:12]}: different "
                   f"overrides? pass the serve's --set/APPLIANCE_SET to the gate")
    if eng.get("lock_digest") and eng["lock_digest"] != lock:
        out.append(f"the serve was built from lock {eng['lock_digest'][:12]}, this host has {lock[:12]}")
    if eng.get("channel") and eng["channel"] != channel:
        out.append(f"the serve runs channel {eng['channel']}, the gate's profile says {channel}")
    if eng.get("verdict") == "fail":
        out.append("the health exporter's verdict is FAIL: see engagement.expectations and engagement.fatal")
    return out
