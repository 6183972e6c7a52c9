"""Known caveats a profile accepts: a warning it names under `caveats` ("RULE path": why it is accepted) is shown
once, where a person reads the profile (`appliance profiles show`, `appliance config`), and not again on every
`validate`, `render` and `run`, where a warning that is always there teaches users to skip warnings. Only warnings:
an error is never accepted. Each accepted caveat must still fire on the profile that names it (tests hold every
shipped profile to that), so the list cannot hide a warning that has changed into another."""

from __future__ import annotations

from collections.abc import Sequence

from appliance.profile.model import Profile
from appliance.rules.base import Finding


def caveat_key(finding: Finding) -> str:
    """How a profile names a finding it accepts: the rule id and the field, e.g. `K38 engine.runner`."""
    return f"{finding.rule} {finding.path}"


def accepted(finding: Finding, profile: Profile) -> str | None:
    """Why `profile` accepts `finding`, or None when it does not (an error never is)."""
    return profile.caveats.get(caveat_key(finding)) if finding.severity == "warning" else None


def to_show(findings: Sequence[Finding], profile: Profile) -> tuple[list[Finding], str | None]:
    """What a command prints on every run: the findings the profile does not accept, and one line naming the
    accepted ones and where they are said in full (None when there are none)."""
    shown = [f for f in findings if accepted(f, profile) is None]
    known = [caveat_key(f) for f in findings if accepted(f, profile) is not None]
    if not known:
        return shown, None
    return shown, (f"{profile.name}: {len(known)} accepted caveat(s) ({', '.join(known)}): "
                   f"`appliance profiles show {profile.name}` says why")
