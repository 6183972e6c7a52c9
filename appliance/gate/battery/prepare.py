"""From `gate --battery NAME --arm ARM` to the battery's run context and its section of the receipt.

Bad input is exit 2 before anything is measured: an unknown battery or arm; an arm whose serve the loaded profile
does not describe (the v1 arm needs engine.runner=v1, the noguard arm cache.guard=0 where the channel's engine has
the guard; where it has none, rule K4 refuses any cache.guard and the arm's serve is the profile as it ships); a
serve that runs another profile than the one the gate loaded (the receipt would credit the wrong settings); a
reference receipt without the row C10 judges.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.channels.capabilities import ENV_GUARD, profile_capabilities, profile_channel
from appliance.errors import ApplianceError
from appliance.gate.battery.definition import ARM_SERVES, ARMS, BATTERIES, Arm, Battery
from appliance.gate.battery.run_context import BatteryRun
from appliance.gate.battery.sizing import REFERENCE_PP2048_D8192, BatteryParams, battery_params_for
from appliance.gate.sizing import GateParams
from appliance.jsonstrict import JsonObject
from appliance.profile.model import Profile

if TYPE_CHECKING:
    from appliance.lock import ChannelLock

ARM_NEEDS: dict[Arm, tuple[str, str, object]] = {
    "v1": ("engine.runner", "runner", "v1"),
    "noguard": ("cache.guard", "guard", 0),
}


def battery_for(name: str) -> Battery:
    if name not in BATTERIES:
        raise ApplianceError(f"--battery {name}: no such battery", field="--battery", value=name,
                             fix=f"choose from {', '.join(BATTERIES)}")
    return BATTERIES[name]


def unguarded_channel(profile: Profile, arm: str) -> str | None:
    """The noguard arm on a channel whose engine has no same-step guard (no VLLM_ALLOW_SPEC_DEC_SAME_STEP_PREFIX_HIT
    among its env vars): that channel's name. Such a serve cannot be started with cache.guard=0 (K4 refuses a
    setting the engine never reads), so the arm runs on the profile as it ships and D2 records why it fails."""
    if arm != "noguard" or profile_capabilities(profile).guard:
        return None
    return profile_channel(profile)


def check_arm(profile: Profile, arm: str) -> Arm:
    if arm not in ARMS:
        raise ApplianceError(f"--arm {arm}: no such arm", field="--arm", value=arm,
                             fix=f"choose from {', '.join(ARMS)}")
    need = ARM_NEEDS.get(arm)  # type: ignore[call-overload]
    if need is not None and unguarded_channel(profile, arm) and profile.cache.guard == "auto":
        need = None  # the escape hatch does not exist on this engine: D2 says so
    if need is not None:
        field, attr, want = need
        section = profile.engine if field.startswith("engine.") else profile.cache
        have = getattr(section, attr)
        if have != want:
            raise ApplianceError(
                f"--arm {arm} judges a serve started with {field}={want}; the profile the gate loaded has "
                f"{field}={have}", field="--arm", value=arm,
                fix=f"start the arm's serve with --set {field}={want} (APPLIANCE_SET) and pass the same --set to "
                    f"the gate", reason=f"the {arm} arm is {ARM_SERVES[arm]}")  # type: ignore[index]
    return arm  # type: ignore[return-value]


def check_same_serve(served: str | None, digest: str) -> None:
    """`served`: the serve's profile digest (provenance.served_digest), `digest` the one the gate loaded."""
    if served and served != digest:
        raise ApplianceError(
            f"the serve runs profile digest {served[:12]}, the gate loaded {digest[:12]}", field="--set",
            fix="pass the gate the serve's own --set/APPLIANCE_SET, so that the receipt names the settings measured",
            reason="a battery line credits a setting (runner, guard) to the serve it was measured on")


def _bench_rows(receipt: Path) -> list[tuple[str, float | None]]:
    """(test, t/s) of a receipt's measured rows: the standard gate's `bench` line is typed; a battery's C10 line keeps
    llama-benchy's rows as its check wrote them, read here as the bench line's metrics (none when they are not)."""
    from pydantic import ValidationError

    from appliance.gate.receipt import load
    from appliance.gate.receipt_model import BenchMetrics

    data = load(receipt)
    rows: list[tuple[str, float | None]] = []
    for name in ("C10", "bench"):
        metrics = getattr(data.check(name), "metrics", None)
        if isinstance(metrics, dict):
            try:
                metrics = BenchMetrics.model_validate(metrics)
            except ValidationError:
                metrics = None
        if isinstance(metrics, BenchMetrics):
            rows += [(r.test, r.t_s) for r in metrics.rows]
    return rows


def reference(params: BatteryParams, profile: Profile, receipt: Path | None) -> tuple[float | None, str]:
    """C10's reference: a receipt's row (--bench-reference), else the harness's figure for this hardware."""
    if receipt is not None:
        rate = next((t for test, t in _bench_rows(receipt) if test == params.bench_row and t), None)
        if rate is None:
            raise ApplianceError(f"--bench-reference {receipt}: no {params.bench_row} row in it",
                                 field="--bench-reference", value=str(receipt),
                                 fix=f"give a receipt whose bench (or C10) measured {params.bench_row}")
        return rate, f"{receipt}: {params.bench_row}"
    figure = REFERENCE_PP2048_D8192.get(profile.hardware.gpu) if params.bench_row == "pp2048 @ d8192" else None
    if figure is None:
        return None, f"none for {profile.hardware.gpu}"
    return figure, "the harness's acceptance: 'the V2 arm measured 1471.8 at d8192' (GB10)"


def battery_run(name: str, arm: str, profile: Profile, gate_params: GateParams, exporter: str | None,
                bench_reference: Path | None) -> BatteryRun:
    """`gate_params`: the gate's own settings after the command line's single values: those that a battery check
    shares (GSM8K's task, include path and runs; llama-benchy's corpus) carry over."""
    tuned_gsm8k, tuned_bench = gate_params.gsm8k, gate_params.bench
    battery = battery_for(name)
    checked = check_arm(profile, arm)
    params = battery_params_for(profile)
    # Single-value options (--gsm8k-include, --gsm8k-task, --bench-corpus, ...) reach the battery's checks too.
    params = replace(params, gsm8k=replace(params.gsm8k, include_path=tuned_gsm8k.include_path, task=tuned_gsm8k.task,
                                           runs=tuned_gsm8k.runs),
                     bench=replace(params.bench, corpus=tuned_bench.corpus))
    ref, source = reference(params, profile, bench_reference)
    return BatteryRun(battery, checked, params, exporter, ref, source, unguarded_channel(profile, checked),
                      default_arm_sets(profile) if checked == "default" else ())


def default_arm_sets(profile: Profile) -> tuple[str, ...]:
    """The runner and SM120 switches the profile's serve renders (render/plan.py, the one source): the harness's
    default arm sets none of them. The SM120 ones are rendered at the fork's own default (the seed: both paths
    "default on"), the runner one is what makes C2 judge the appliance's setting instead of the engine's routing."""
    from appliance.channels import capabilities as engine_vars
    from appliance.render.plan import engine_env, plan_facts

    env = engine_env(profile, plan_facts(profile))
    keys = (engine_vars.ENV_RUNNER, engine_vars.ENV_SM120_DECODE, engine_vars.ENV_SM120_PREFILL)
    return tuple(f"{k}={env[k]}" for k in keys if k in env)


def serve_of(run: BatteryRun) -> str:
    if run.unguarded_channel:
        return (f"the profile as it ships: channel {run.unguarded_channel} has no same-step ghost-block guard "
                f"({ENV_GUARD} is not among its engine's env vars), so cache.guard=0 cannot be set (K4)")
    if run.arm_sets:
        return (f"{ARM_SERVES[run.arm]}; this serve differs: it renders {', '.join(run.arm_sets)} (start it with "
                f"--set engine.runner=auto, and pass the same --set to the gate, to judge the engine's routing)")
    return ARM_SERVES[run.arm]


def receipt_section(run: BatteryRun, lock: ChannelLock, image: dict[str, str] | None) -> JsonObject:
    """What the receipt says about the battery before its lines: the definition, this arm, what is not run.
    `lock`: the profile's channel."""
    b = run.battery
    e = lock.engine
    pinned = {"fork": f"{e.repo}@{e.commit}", "image": f"the published image {e.label}"}.get(
        e.source, f"{e.name}=={e.version} from a package index")
    tree = (f"channel {lock.name} of versions.json pins {pinned}"
            + (f"; image label engine commit {image['engine_commit']}" if image and image.get("engine_commit") else "")
            + f"; the battery was accepted on {b.expect}")
    return {
        "name": b.name, "source": b.source, "expect": b.expect, "arm": run.arm, "serve": serve_of(run),
        "size": run.params.size, "min_checks": b.min_checks,
        "definition": [asdict(c) for c in b.checks],
        "not_run": [{**asdict(o), "evidence": tree if o.id.startswith("A") else None} for o in b.outside],
        "reference": {"value": run.reference, "source": run.reference_source},
    }
