"""launch.json read back into the resolved serve (appliance/serve/resolved.py), for the programs `appliance run`
started: the exporter and the canary's watch read it once, and the exporter follows it while it serves, since a
canary step-down rewrites launch.json with the rung's settings and restarts the engine on them
(appliance/canary/ladder.py). No program of a running serve loads the YAML again."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from appliance.errors import ApplianceError
from appliance.lock import channel_lock
from appliance.profile.loader import LoadedProfile
from appliance.profile.model import Profile
from appliance.render.plan import plan_facts
from appliance.render.serveplan import ServePlan
from appliance.render.supervisord import CrashguardSection, LogtailSection, RunFiles
from appliance.run.launchfile import LaunchFile, LaunchFileError, read_launch
from appliance.serve.resolved import ENGINE, ResolvedServe, RunSections


def loaded_from_launch(launch: LaunchFile, path: Path) -> LoadedProfile:
    try:  # JSON as written by `appliance run`: validated as JSON (a date is its ISO text there), strictly
        profile = Profile.model_validate_json(json.dumps(launch.profile))
    except ValidationError as exc:
        raise ApplianceError(f"{path}: the stored profile is not valid: {exc.errors()[0]['msg']} at "
                             f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}", field="--launch", value=str(path),
                             fix="run `appliance run` again to rewrite it") from None
    loaded = LoadedProfile(profile, Path(launch.profile_source), dict(launch.profile_origins))
    if loaded.digest != launch.profile_digest:
        raise ApplianceError(f"{path}: the stored profile's digest is {loaded.digest[:12]}, the file says "
                             f"{launch.profile_digest[:12]}", field="--launch", value=str(path),
                             fix="run `appliance run` again to rewrite it")
    return loaded


def serve_from_launch(launch: LaunchFile, path: Path) -> ResolvedServe:
    """The resolved serve `launch` (read from `path`) serializes: its profile, digest-checked; the lock and facts of
    its channel, from their owners; its placement, plan and run sections as `appliance run` resolved them."""
    loaded = loaded_from_launch(launch, path)
    profile = loaded.profile
    if launch.plan is not None:
        plan = ServePlan(launch.plan.argv, launch.plan.env, launch.role, launch.plan.setup)
    else:  # written before the plan was kept: its programs as they run (none: an exporter's launch alone)
        setup = [p.argv for name, p in launch.programs.items() if name.startswith("setup")]
        engine = launch.programs.get(ENGINE)
        plan = ServePlan(engine.argv if engine else [], {}, launch.role, setup)
    files = RunFiles.at(path.parent.absolute())
    run = RunSections(files.run_dir, dict(launch.programs), launch.exporter, CrashguardSection.of(files),
                      LogtailSection.of(files))
    return ResolvedServe(loaded, channel_lock(profile.engine.channel, profile.hardware.target), plan_facts(profile),
                         launch.placement, plan, run)


def read_serve(path: Path) -> ResolvedServe:
    """The serve a run folder's launch.json holds, as it is now; ApplianceError (exit 2) when it cannot be read."""
    try:
        launch = read_launch(path)
    except LaunchFileError as exc:
        raise ApplianceError(str(exc), field="launch.json", value=str(path),
                             fix="restart the serve (`appliance run`): it rewrites the launch") from None
    return serve_from_launch(launch, path)


def serving_profile(path: Path) -> tuple[LoadedProfile, str | None]:
    """The profile a serve runs and its engine's API URL, from its launch.json as it is now (None: a worker's)."""
    serve = read_serve(path)
    return serve.loaded, serve.place.engine_url


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size  # launch.json is replaced by a rename: a new inode


class LaunchFollower:
    """Called every exporter poll: the profile of a rewritten launch.json when it differs from the one judged so
    far, else None. A launch.json it cannot read (mid-replace cannot happen; a hand edit can) keeps the last one."""

    def __init__(self, path: Path, loaded: LoadedProfile) -> None:
        self.path, self.digest, self.stamp = path, loaded.digest, _stamp(path)
        self.error: str | None = None

    def __call__(self) -> LoadedProfile | None:
        stamp = _stamp(self.path)
        if stamp == self.stamp:
            return None
        self.stamp = stamp
        try:
            launch = read_launch(self.path)
            if launch.profile_digest == self.digest:
                return None
            loaded = loaded_from_launch(launch, self.path)
        except (LaunchFileError, ApplianceError, ValueError) as exc:
            self.error = str(exc)
            return None
        self.digest, self.error = loaded.digest, None
        return loaded
