"""The two sides of an upgrade: the incumbent (the serve as it runs, or as its profile resolves) and the candidate
(the same profile on another channel, with the overrides the move needs), each a LoadedProfile, plus U1: the
candidate must render and validate on its channel's own facts.

The candidate is the profile as this shell resolves it (APPLIANCE_SET, --set, the active channel) with
`engine.channel` and the move's overrides on top. Where a serve runs (a run folder with launch.json), this shell must
resolve the very profile that serve runs: otherwise the candidate would differ from the incumbent in more than the
channel, and a promote would silently change the serve's ports or limits too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.jsonstrict import JsonObject
from appliance.lock import ChannelLock, channel_lock
from appliance.profile.active import Active
from appliance.profile.loader import LoadedProfile, load_profile
from appliance.rules import Finding, context_for, evaluate, has_errors
from appliance.run.launchfile import LaunchFile, LaunchFileError, read_launch


@dataclass(frozen=True)
class Request:
    """What the user asked to move: the profile (as `appliance run` takes it) and where to."""

    profile: str
    env_overrides: tuple[str, ...] = ()
    cli_overrides: tuple[str, ...] = ()
    to: str | None = None
    """The candidate channel."""
    sets: tuple[str, ...] = ()
    """Overrides the move needs on the candidate (a flag another engine spells otherwise)."""
    active: Active | bool = True
    """The incumbent's upgrade layer: True = the active record of this host (active.json), an Active = the one a
    compose env file holds, False = none."""


@dataclass(frozen=True)
class Pair:
    incumbent: LoadedProfile
    candidate: LoadedProfile
    sets: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.incumbent.profile.name

    @property
    def from_channel(self) -> ChannelLock:
        p = self.incumbent.profile
        return channel_lock(p.engine.channel, p.hardware.target)

    @property
    def to_channel(self) -> ChannelLock:
        p = self.candidate.profile
        return channel_lock(p.engine.channel, p.hardware.target)


def load_incumbent(req: Request) -> LoadedProfile:
    return load_profile(req.profile, env_overrides=list(req.env_overrides), cli_overrides=list(req.cli_overrides),
                        active=req.active)


def candidate_active(profile: str, channel: str, sets: tuple[str, ...]) -> Active:
    """The candidate as an active record: the very layer a promote writes (so the candidate and the promoted serve
    resolve alike). The incumbent's own record is not part of it: a promote's record carries exactly its channel and
    `sets`, so what an earlier move needed does not ride along unasked."""
    return Active(profile, channel, list(sets), origin="upgrade:candidate")


def load_candidate(req: Request, channel: str, sets: tuple[str, ...], extra: tuple[str, ...] = ()) -> LoadedProfile:
    """The profile with the candidate's layer (and `extra`: a side-by-side serve's own ports, as --set)."""
    name = load_profile(req.profile, active=False).profile.name
    loaded = load_profile(req.profile, env_overrides=list(req.env_overrides),
                          cli_overrides=[*req.cli_overrides, *extra], active=candidate_active(name, channel, sets))
    check_overrides_free(loaded, ("engine.channel", *(s.partition("=")[0].strip() for s in sets)))
    return loaded


def pair_for(req: Request, to: str | None = None) -> Pair:
    target = to or req.to
    if not target:
        raise ApplianceError("no candidate channel given", field="--to",
                             fix="name the channel to move to (appliance channels lists them)")
    incumbent = load_incumbent(req)
    channel_lock(target, incumbent.profile.hardware.target)  # an unknown name: exit 2 naming the nearest
    if target == incumbent.profile.engine.channel and not req.sets:
        raise ApplianceError(f"profile {incumbent.profile.name} already runs channel {target}", field="--to",
                             value=target, fix="name another channel (appliance channels), or give --set to change "
                                               "what the move carries")
    return Pair(incumbent, load_candidate(req, target, req.sets), req.sets)


def check_overrides_free(loaded: LoadedProfile, keys: tuple[str, ...]) -> None:
    """A key the upgrade switches must not be pinned by APPLIANCE_SET or --set: the next `appliance run` would put
    the pin back and undo the switch."""
    for key in keys:
        origin = loaded.origin(key)
        if origin.startswith(("env:APPLIANCE_SET", "cli:")):
            raise ApplianceError(
                f"{key} is pinned by {origin} (value {getattr_path(loaded.profile.model_dump(), key)!r})",
                field=key, value=origin,
                fix=f"drop {key}=… from APPLIANCE_SET / --set (put it in the profile, or let `appliance upgrade` "
                    f"switch it)",
                reason="the upgrade switches it as the active channel; an override would outweigh that on the next "
                       "start")


def getattr_path(data: JsonObject, dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def candidate_findings(candidate: LoadedProfile) -> list[Finding]:
    return evaluate(context_for(candidate.profile))


def require_renderable(candidate: LoadedProfile, consequence: str) -> list[Finding]:
    """U1: every finding on the candidate; ApplianceError (exit 2) naming each error."""
    findings = candidate_findings(candidate)
    if has_errors(findings):
        p = candidate.profile
        listed = "\n    ".join(f.render() for f in findings if f.severity == "error")
        raise ApplianceError(
            f"U1 profile {p.name} cannot be rendered on channel {p.engine.channel}; {consequence}:\n    {listed}",
            field="--to", value=p.engine.channel,
            fix="give the overrides the move needs with --set (each error names its field), or pick another channel",
            reason="the candidate's own engine facts refuse what the profile renders")
    return findings


# --- the serve that runs ----------------------------------------------------------------------------------------

def read_serve_launch(run_dir: Path) -> LaunchFile | None:
    path = run_dir / "launch.json"
    if not path.exists():
        return None
    try:
        return read_launch(path)
    except LaunchFileError as exc:
        raise ApplianceError(str(exc), field="--run-dir", value=str(run_dir),
                             fix="point --run-dir at the run folder of `appliance run`") from None


def flat(data: Any, prefix: str = "") -> JsonObject:
    if isinstance(data, dict):
        out: JsonObject = {}
        for k, v in data.items():
            out |= flat(v, f"{prefix}{k}.")
        return out
    return {prefix.rstrip("."): data}


def check_same_serve(incumbent: LoadedProfile, launch: LaunchFile, run_dir: Path) -> None:
    """This shell resolves the profile the serve in `run_dir` runs (launch.json), field for field."""
    if launch.profile_name != incumbent.profile.name:
        raise ApplianceError(f"{run_dir} runs profile {launch.profile_name}, not {incumbent.profile.name}",
                             field="--run-dir", value=str(run_dir), fix="name the run folder of this profile's serve")
    if launch.profile_digest == incumbent.digest:
        return
    ours, theirs = flat(incumbent.profile.model_dump(mode="json")), flat(launch.profile)
    differ = [f"{k}: serve {theirs.get(k)!r}, here {ours.get(k)!r}" for k in sorted(set(ours) | set(theirs))
              if ours.get(k) != theirs.get(k)]
    raise ApplianceError(
        f"this shell resolves profile {incumbent.profile.name} otherwise than the serve in {run_dir} runs it: "
        + "; ".join(differ[:8]), field="APPLIANCE_SET", value=differ[:8],
        fix="run `appliance upgrade` with the serve's APPLIANCE_SET / --set (and APPLIANCE_HOME), as `appliance run` "
            "was started",
        reason="the candidate must differ from the running serve in the channel (and the move's overrides) only")
