"""promote / rollback for container deployments: the compose env file and the Kubernetes manifests
(appliance/upgrade/media.py). The same U1 (renders), U4 (a qualification of this candidate, unless --force) and U5
(every rank on one lock, asked of the head's exporter where it answers) as without containers.

Compose with `--compose-file`: the service is recreated on the switched file and must prove itself (ready on the
new channel and profile, first canary rounds) within the budget, else the file is switched back and the service
recreated on it. Without `--compose-file`, and for Kubernetes, the switch is written and the command to apply it
printed; proving it is then the platform's (the readiness probe, `kubectl rollout status`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.lock import image_tag
from appliance.placement import api_port_of
from appliance.profile.active import Active, cut_chain
from appliance.profile.loader import LoadedProfile
from appliance.render.serveplan import http_url
from appliance.upgrade.candidate import Pair, Request, pair_for, require_renderable
from appliance.upgrade.history import RecordJson, new_record, shaped, utc_now, write_record
from appliance.upgrade.media import (
    ComposeEnv,
    compose_service,
    compose_up,
    image_var,
    read_compose_env,
    restore_compose_env,
    restore_manifests,
    write_compose_env,
    write_manifests,
)
from appliance.upgrade.promote import Proof, calibration_of, canary_rounds, require_qualification
from appliance.upgrade.qualify import default_budget
from appliance.upgrade.serve import Expect, ServeStatus, wait_ready

if TYPE_CHECKING:
    from appliance.health.monitor import StatusJson

Report = Callable[[str], None]
K8S_STATE = "upgrade.json"


@dataclass
class MediaOptions:
    compose_env: Path | None = None
    compose_file: Path | None = None
    env_files: list[Path] = field(default_factory=list)
    """The deployment's own env files, read before the upgrade's (compose reads `.env` only without --env-file)."""
    k8s_out: Path | None = None
    k8s: dict[str, object] = field(default_factory=dict)
    no_rdma: bool = False
    image: str | None = None
    exporter: str | None = None
    budget_s: float | None = None
    canary_rounds: int = 1
    force: bool = False


def _exporter_url(loaded: LoadedProfile, given: str | None) -> str:
    from appliance.settings import load_settings

    port = load_settings().health_port or loaded.profile.server.health_port  # APPLIANCE_HEALTH_PORT, as `run` reads it
    return (given or http_url("127.0.0.1", port)).rstrip("/")


def _status(url: str) -> StatusJson | None:
    try:
        return httpx.get(f"{url}/status", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None


def check_ranks(pair: Pair, opts: MediaOptions) -> str | None:
    """U5 where the serve spans nodes: every rank on the head's lock, as the head's exporter says."""
    from appliance.upgrade.ranks import check_one_lock

    nodes = pair.incumbent.profile.hardware.nodes
    if nodes == 1:
        return None
    url = _exporter_url(pair.incumbent, opts.exporter)
    return check_one_lock(_status(url), nodes, url)


def _record(pair: Pair, medium: str, qual: Any, budget: float | None) -> tuple[Path, RecordJson]:
    folder = new_record(pair.name, "promote", pair.to_channel.name)
    record: RecordJson = {
        "kind": "promote", "profile": pair.name, "started_at": utc_now(), "medium": medium,
        "from": {"channel": pair.from_channel.name, "profile_digest": pair.incumbent.digest,
                 "lock_digest": pair.from_channel.digest},
        "to": {"channel": pair.to_channel.name, "profile_digest": pair.candidate.digest,
               "lock_digest": pair.to_channel.digest, "sets": list(pair.sets)},
        "qualification": qual.id if qual else None, "forced": qual is None, "budget_s": budget,
        "receipts": dict((qual.data.get("receipts") or {}) if qual else {}),
    }
    write_record(folder, record)
    return folder, record


# --- compose -----------------------------------------------------------------------------------------------------

def _compose_pair(req: Request, path: Path) -> Pair:
    """The incumbent is what the env file holds now (the profile's own channel without one)."""
    from appliance.profile.loader import load_profile

    plain = load_profile(req.profile, active=False).profile
    existing = read_compose_env(path, plain.name, plain.hardware.target)
    return pair_for(Request(req.profile, req.env_overrides, req.cli_overrides, req.to, req.sets,
                            existing.active if existing and existing.active else False))


def _compose_prove(opts: MediaOptions, loaded: LoadedProfile, channel: str, budget: float, rounds: int,
                   calibration: Path | None, report: Report) -> Proof:
    assert opts.compose_file is not None and opts.compose_env is not None
    url = _exporter_url(loaded, opts.exporter)
    began = time.monotonic()
    service = compose_service(opts.compose_file, loaded.profile.name)
    report(f"recreating compose service {service} on channel {channel} (budget {budget:g} s)")
    try:
        compose_up(opts.compose_file, [*opts.env_files, opts.compose_env], service)
    except ApplianceError as exc:
        return Proof(False, f"compose up failed: {exc.message}", seconds=time.monotonic() - began)

    def look() -> ServeStatus:
        status = _status(url)
        return ServeStatus(status, "RUNNING", None, None if status else "the exporter did not answer")

    # A recreated container starts a new log (its exporter's run count starts again): the channel and the profile
    # digest tell the new serve from the old one.
    ready = wait_ready(look, Expect(channel, loaded.digest), budget, report=report)
    if not ready.ok:
        return Proof(False, f"not ready: {ready.why}", ready, seconds=time.monotonic() - began)
    api = http_url("127.0.0.1", api_port_of(loaded.profile))
    rows = canary_rounds(api, loaded, rounds, calibration, report) if rounds else []
    bad = next((r for r in rows if not r["healthy"]), None)
    took = time.monotonic() - began
    if bad:
        return Proof(False, f"canary round {bad['round']} failed: {bad.get('error') or ', '.join(bad['signatures'])}",
                     ready, rows, took)
    return Proof(True, f"ready in {ready.seconds:.0f} s and {len(rows)} canary round(s) healthy", ready, rows, took)


def promote_compose(req: Request, opts: MediaOptions, report: Report) -> RecordJson:
    assert opts.compose_env is not None
    pair = _compose_pair(req, opts.compose_env)
    require_renderable(pair.candidate, "nothing was switched")
    agreement = check_ranks(pair, opts)
    qual = require_qualification(pair, opts.force)
    budget = opts.budget_s or default_budget(pair.candidate.profile)
    folder, record = _record(pair, "compose", qual, budget)
    record["compose_env"] = str(opts.compose_env)
    if agreement:
        record["ranks"] = agreement
    image = opts.image or image_tag(pair.to_channel.name)
    env = ComposeEnv(image, image_var(pair.to_channel.target), Active(pair.name, pair.to_channel.name,
                                                                      list(pair.sets)), folder.name)
    write_compose_env(opts.compose_env, env)
    report(f"switched {opts.compose_env}: {env.image_key}={image}, APPLIANCE_UPGRADE_CHANNEL={pair.to_channel.name}"
           f" (previous kept as {opts.compose_env.name}.previous)")
    if opts.compose_file is None:
        record.update(outcome="switched", finished_at=utc_now(),
                      apply=f"docker compose --env-file .env --env-file {opts.compose_env} --profile LAYOUT up -d")
        write_record(folder, record)
        return record | {"record": str(folder)}
    began = time.monotonic()
    proof = _compose_prove(opts, pair.candidate, pair.to_channel.name, budget, opts.canary_rounds,
                           calibration_of(qual), report)
    record["proof"] = proof.to_json()
    if proof.ok:
        record.update(outcome="promoted", finished_at=utc_now(), seconds=round(time.monotonic() - began, 1))
    else:
        report(f"U4 the promoted serve failed: {proof.why}; switching {opts.compose_env} back")
        restore_compose_env(opts.compose_env)
        back = _compose_prove(opts, pair.incumbent, pair.from_channel.name, budget, 0, None, report)
        record.update(outcome="rolled back", why=proof.why, rollback=back.to_json(), finished_at=utc_now(),
                      seconds=round(time.monotonic() - began, 1))
    write_record(folder, record)
    return record | {"record": str(folder)}


def rollback_compose(req: Request, opts: MediaOptions, report: Report) -> RecordJson:
    assert opts.compose_env is not None
    from appliance.profile.loader import load_profile

    plain = load_profile(req.profile, active=False).profile
    current = read_compose_env(opts.compose_env, plain.name, plain.hardware.target)
    restore_compose_env(opts.compose_env)
    back = read_compose_env(opts.compose_env, plain.name, plain.hardware.target)
    channel = back.active.channel if back and back.active else str(plain.engine.channel)
    folder = new_record(plain.name, "rollback", channel)
    record: RecordJson = {"kind": "rollback", "profile": plain.name, "started_at": utc_now(), "medium": "compose",
                          "compose_env": str(opts.compose_env),
                          "from": {"channel": current.active.channel if current and current.active else None},
                          "to": {"channel": channel}}
    if opts.compose_file is None:
        record.update(outcome="rolled back", finished_at=utc_now(),
                      apply=f"docker compose --env-file .env --env-file {opts.compose_env} --profile LAYOUT up -d")
    else:
        loaded = load_profile(req.profile, env_overrides=list(req.env_overrides), cli_overrides=list(req.cli_overrides),
                              active=back.active if back and back.active else False)
        proof = _compose_prove(opts, loaded, channel, opts.budget_s or default_budget(loaded.profile), 0, None, report)
        record.update(outcome="rolled back" if proof.ok else "rollback failed", proof=proof.to_json(),
                      finished_at=utc_now())
    write_record(folder, record)
    report(f"{record['outcome'].upper()} {plain.name} to {channel} ({opts.compose_env})")
    return record | {"record": str(folder)}


# --- Kubernetes --------------------------------------------------------------------------------------------------

class _K8sState(BaseModel):
    """What `promote --k8s-out` writes beside the manifests: the channel it switched to, and the state it replaced."""

    model_config = ConfigDict(extra="forbid", strict=True)
    channel: str
    set: list[str] = []
    decision: str | None = None
    previous: _K8sState | None = None


MAX_K8S_STATE_BYTES = 1024 * 1024


def _k8s_state(out: Path, profile: str) -> JsonObject | None:
    """The state a promote left (None: none yet), through the strict reader: an unreadable or edited one was taken
    as "none", so a rollback restored the manifests without knowing what it rolled back to."""
    import os

    from appliance.jsonstrict import load_file

    path = out / f"{profile}.{K8S_STATE}"
    if not os.path.lexists(path):
        return None
    data = load_file(path, K8S_STATE, MAX_K8S_STATE_BYTES, "Kubernetes promote state")
    return shaped(data, _K8sState, path, "Kubernetes promote state", K8S_STATE,
                  fix=f"put back the {K8S_STATE} that `appliance upgrade promote --k8s-out` wrote (or remove it and "
                      "the manifests' .previous to start the history again)",
                  reason="a rollback switches to what this file says")


def promote_k8s(req: Request, opts: MediaOptions, report: Report) -> RecordJson:
    assert opts.k8s_out is not None
    from appliance.paths import write_json_atomic
    from appliance.profile.loader import load_profile
    from appliance.settings import load_settings

    plain = load_profile(req.profile, active=False).profile
    state = _k8s_state(opts.k8s_out, plain.name)
    active = Active(plain.name, state["channel"], list(state.get("set") or [])) if state else False
    pair = pair_for(Request(req.profile, req.env_overrides, req.cli_overrides, req.to, req.sets, active))
    require_renderable(pair.candidate, "no manifests rendered")
    agreement = check_ranks(pair, opts) if opts.exporter else None
    qual = require_qualification(pair, opts.force)
    folder, record = _record(pair, "kubernetes", qual, None)
    overrides = [*load_settings().overrides(), *req.cli_overrides, f"engine.channel={pair.to_channel.name}",
                 *pair.sets]
    from appliance.cliargs import k8s_manifests
    from appliance.render.k8s import dump

    text = dump(k8s_manifests(pair.candidate, opts.k8s, image=opts.image, overrides=tuple(overrides),
                              no_rdma=opts.no_rdma, warn=report), "yaml")
    current, previous = write_manifests(opts.k8s_out, plain.name, text)
    write_json_atomic(opts.k8s_out / f"{plain.name}.{K8S_STATE}",
                      {"channel": pair.to_channel.name, "set": list(pair.sets), "decision": folder.name,
                       "previous": cut_chain(state)})
    record.update(outcome="switched", manifests=str(current), previous=str(previous) if previous.exists() else None,
                  finished_at=utc_now(), apply=f"kubectl apply -f {current}",
                  ranks=agreement or ("one LeaderWorkerSet template for every rank" if plain.hardware.nodes > 1
                                      else None))
    write_record(folder, record)
    report(f"wrote {current} (channel {pair.to_channel.name}); apply: kubectl apply -f {current}; roll back: "
           f"appliance upgrade rollback {plain.name} --k8s-out {opts.k8s_out}")
    return record | {"record": str(folder)}


def rollback_k8s(req: Request, opts: MediaOptions, report: Report) -> RecordJson:
    assert opts.k8s_out is not None
    from appliance.paths import write_json_atomic
    from appliance.profile.loader import load_profile

    plain = load_profile(req.profile, active=False).profile
    state = _k8s_state(opts.k8s_out, plain.name)
    current = restore_manifests(opts.k8s_out, plain.name)
    previous = (state or {}).get("previous")
    channel = (previous or {}).get("channel") or str(plain.engine.channel)
    state_path = opts.k8s_out / f"{plain.name}.{K8S_STATE}"
    if previous:
        write_json_atomic(state_path, previous)
    else:
        state_path.unlink(missing_ok=True)
    folder = new_record(plain.name, "rollback", channel)
    record = {"kind": "rollback", "profile": plain.name, "started_at": utc_now(), "medium": "kubernetes",
              "from": {"channel": (state or {}).get("channel")}, "to": {"channel": channel},
              "outcome": "rolled back", "manifests": str(current), "apply": f"kubectl apply -f {current}",
              "finished_at": utc_now()}
    write_record(folder, record)
    report(f"restored {current} (channel {channel}); apply: kubectl apply -f {current}")
    return record | {"record": str(folder)}
