"""Where a receipt's numbers came from: the stack (lock digest), the serve profile, the image, the engine
version the server reports, what the health exporter read back from the serve log, and the host.

Engagement facts come from the exporter's `/status`, i.e. from the serve's own log lines (K12): the
receipt says what the engine printed, never what the profile asked for.
"""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any

from appliance.gate.client import ServeError, get_json
from appliance.jsonstrict import JsonObject

if TYPE_CHECKING:
    from appliance.health.monitor import StatusJson

IMAGE_ENV_PREFIX = "APPLIANCE_IMAGE_"


def image_labels(environ: dict[str, str] | None = None) -> dict[str, str] | None:
    """The labels the image exposes as APPLIANCE_IMAGE_* variables (its Dockerfile sets them beside its OCI
    labels, which a process inside cannot read); None outside an image."""
    env = os.environ if environ is None else environ
    labels = {k[len(IMAGE_ENV_PREFIX):].lower(): v for k, v in sorted(env.items())
              if k.startswith(IMAGE_ENV_PREFIX) and v}
    return labels or None


def engine_info(url: str) -> JsonObject:
    """The server's own version (/version) and what it serves (/v1/models)."""
    out: JsonObject = {"url": url}
    try:
        out["version"] = get_json(f"{url}/version").get("version")
    except ServeError as exc:
        out["version"], out["version_error"] = None, str(exc)
    if not isinstance(out["version"], str | None):
        out["version"] = None
    models = _list(get_json(f"{url}/v1/models").get("data"))
    out["models"] = [{"id": _str(m.get("id")), "root": _str(m.get("root")),
                      "max_model_len": _int(m.get("max_model_len"))} for m in models if isinstance(m, dict)]
    return out


# What a serve or an exporter answers is read by shape: a value of another type is absent, never a traceback.
def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def exporter_status(url: str | None) -> tuple[StatusJson | None, str | None]:
    if not url:
        return None, "no exporter URL"
    try:
        return get_json(f"{url.rstrip('/')}/status", to_serve=False), None
    except ServeError as exc:
        return None, str(exc)


def served_digest(status: StatusJson | None) -> str | None:
    """The profile digest the serve's exporter reports (/status): read once by `gate` and compared with the
    profile it loaded by both setups, the checks' (a warning) and the battery's (a refusal)."""
    return _str(_obj((status or {}).get("profile")).get("digest"))


def _runner(facts: JsonObject, log_ready: bool) -> str | None:
    if facts.get("runner_v2"):
        return "v2"
    if facts.get("runner_fallback_reason") or log_ready:
        return "v1"  # V1 prints no line of its own; a ready log without the V2 line means V1
    return None


def engagement(status: StatusJson | None, error: str | None = None) -> JsonObject:
    """The log-verified facts a reader of the receipt looks for first, plus the exporter's whole fact table."""
    if status is None:
        return {"available": False, "error": error}
    facts = _obj(status.get("facts"))
    active, total = _int(facts.get("guard_active")), _int(facts.get("guard_total"))
    profile = _obj(status.get("profile"))
    return {
        "available": True,
        "state": _str(status.get("state")),
        "verdict": _str(status.get("verdict")),
        "guard": f"{active}/{total}" if active is not None and total is not None else None,
        "runner": _runner(facts, status.get("log_ready") is True),
        "sm120_decode": facts.get("sm120_decode") is True,
        "attention_backend": _str(facts.get("attention_backend")),
        "kv_tokens": _int(facts.get("kv_tokens")),
        "kv_max_concurrency": facts.get("kv_max_concurrency"),
        "expectations": [{k: e.get(k) for k in ("rule", "name", "status", "detail")}
                         for e in _list(status.get("expectations")) if isinstance(e, dict)
                         and all(isinstance(e.get(k), str) for k in ("rule", "name", "status"))],
        "fatal": [h for h in _list(status.get("fatal")) if isinstance(h, dict)],
        "profile": {"name": _str(profile.get("name")), "digest": _str(profile.get("digest"))} if profile else None,
        "lock_digest": _str(status.get("lock_digest")),
        "channel": _str(status.get("channel")),
        "versions": status.get("versions") if isinstance(status.get("versions"), dict) else None,
        "facts": facts,
    }


def _round(gib: float | None) -> float | None:
    return None if gib is None else round(gib, 1)


def hardware(profile: Any) -> JsonObject:
    """This host, one GPU probe and `doctor`'s GPU and version checks. Not the pre-start checks (memory
    floor, stale engine, port): against a running serve they would report the serve itself."""
    from appliance.catalogue import load_catalogue
    from appliance.doctor.gpu import probe_gpus
    from appliance.doctor.host import meminfo_gib
    from appliance.doctor.report import check_gpu, check_versions

    probe = probe_gpus()
    target = load_catalogue().gpus[profile.hardware.gpu]
    checks = [c.as_dict() for c in (*check_gpu(profile, target, probe), *check_versions(profile))]
    return {"host": platform.node(), "machine": platform.machine(), "os": platform.platform(),
            "cpus": os.cpu_count(), "mem_total_gib": _round(meminfo_gib("MemTotal")),
            "gpus": [{"name": g.name, "compute_capability": g.compute_capability, "driver": g.driver,
                      "memory_gib": g.memory_gib} for g in probe.gpus],
            "doctor": checks}
