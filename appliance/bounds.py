"""Bounds every value from outside keeps, whichever way it enters (profile, APPLIANCE_* env, --set, a flag).

Each check raises the one error type naming the field, the value (escaped and truncated: never an unbounded
repr), the fix and the reason. Stdlib only: the settings, the loader and the CLI flags share these functions,
so a bound cannot differ between a flag, the environment and a profile.
"""

from __future__ import annotations

import ipaddress
import re
import reprlib
import unicodedata
from collections.abc import Mapping
from typing import Any

from appliance.errors import ApplianceError
from appliance.redact import redact

CHANNEL_PATTERN = r"^[a-z0-9][a-z0-9.+-]*$"
CHANNEL_MAX_CHARS = 100
"""An engine channel's name, wherever it enters (profile engine.channel, a bundle's manifest, channels/facts.py)."""
MAX_ARG_BYTES = 128 * 1024
"""The kernel's MAX_ARG_STRLEN (32 pages): exec refuses an argv word of this many bytes or more."""
SHOW_CHARS = 60
PORT_MIN, PORT_MAX = 1, 65535
RENDEZVOUS_PORT_OFFSET = 1
"""The cross-node consistency exchange listens on master_port + 1 (multinode/rendezvous.py)."""
QUALIFY_PORT_OFFSET = 2
"""The fabric qualification's process group meets on master_port + 2 (multinode/fabric.py, K25)."""
MODEL_SYNC_PORT_OFFSET = 3
"""With distributed.sync_model, the head serves its verified snapshot (rsync) on master_port + 3 (weights/sync.py)."""
MAX_MASTER_PORT = PORT_MAX - max(RENDEZVOUS_PORT_OFFSET, QUALIFY_PORT_OFFSET, MODEL_SYNC_PORT_OFFSET)
"""The highest master port whose derived ports (rendezvous, fabric qualification, model sync) are still ports."""
EXPORTER_BIND_LOCAL = "127.0.0.1"
"""The exporter's bind address on a native single node or head (run/exposure.exporter_bind): nobody off the host
asks it (a worker asks the head's API, never its exporter); probes use loopback or the probe's own socket."""
EXPORTER_BIND_ALL = "0.0.0.0"
"""Every interface: what compose (a Prometheus on another node scrapes each rank) and the Kubernetes manifests
(Prometheus scrapes the pod IP, the leader asks each worker's pod) set explicitly, and a native worker's bind when
its address on the fabric is not known before it joins."""
IFNAMSIZ = 16
MAX_DRAIN_S = 3600.0
"""The longest a stopping pod waits for its running requests (`appliance drain`, `appliance k8s --drain-s`): an
hour; the pod's termination grace period holds the wait."""
PROMOTE_DRAIN_S = 10.0
"""A promote's or rollback's default wait for a moment when the engine runs no request, before it stops the engine
(`appliance upgrade promote|rollback --drain-s`): the serve keeps serving meanwhile."""
MAX_NODES = 16
"""Nodes a serve may span (the profile's hardware.nodes); ranks are 0 (the head) .. MAX_NODES - 1."""

_CONTROL_WHY = ("a newline, carriage return, NUL or escape inside a value can end a config line or an argument "
                "early and smuggle in another (a supervisor program, an env entry, a flag), or rewrite the terminal")


def _repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = SHOW_CHARS
    r.maxlevel, r.maxlist, r.maxdict = 2, 4, 4
    return r


_SHOW = _repr()


def show(value: Any, limit: int = SHOW_CHARS) -> str:
    """A value for an error message: masked (appliance/redact.py), then escaped (control and format characters
    visible), then truncated, never unbounded. In that order: a secret cut in two by the limit, or escaped by
    repr(), would no longer be recognised and leak in part."""
    if isinstance(value, str):
        masked = redact(value)
        head = repr(masked[:limit])  # repr() escapes every character str.isprintable() refuses
        return head if len(masked) <= limit else f"{head}… ({len(value):,} chars)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
    try:
        text = _SHOW.repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit, or a self-referencing value
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 2 * limit else text[: 2 * limit] + "…"


def control_char(text: str) -> tuple[int, str] | None:
    """The first character that is no printable text: C0 (newline, CR, NUL, ESC, tab…), DEL, C1, the Unicode
    line/paragraph separators, format characters (U+202E right-to-left override, U+2066 isolate, U+200B zero width
    space, U+200D joiner, U+FEFF: they reorder or hide what a terminal or an editor shows) and lone surrogates."""
    if text.isprintable():  # the common case, in C: no character of the categories below is printable
        return None
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in _NOT_TEXT:
            return i, ch
    return None


_NOT_TEXT = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def check_text(field: str, value: str, *, max_bytes: int = MAX_ARG_BYTES) -> str:
    """Printable, one line, short enough for an argv word."""
    bad = control_char(value)
    if bad is not None:
        i, ch = bad
        raise ApplianceError(
            f"{field}={show(value)}: control character {ch!r} at position {i}",
            field=field, value=show(value),
            fix="remove the character: a value is one line of printable text", reason=_CONTROL_WHY)
    size = len(value.encode("utf-8", "surrogatepass"))
    if size >= max_bytes:
        raise ApplianceError(
            f"{field}={show(value)}: {size:,} bytes, over the {max_bytes:,}-byte limit",
            field=field, value=show(value), fix="shorten the value",
            reason="the kernel refuses to execute a command one of whose arguments is 128 KiB or more"
            if max_bytes == MAX_ARG_BYTES else "no valid value is that long")
    return value


LEAF_TYPES = (str, int, float, bool, type(None))


def check_tree(data: Any, origin_of: Mapping[str, str] | None = None, prefix: str = "", depth: int = 0) -> None:
    """Every key and string leaf of a loaded document (profile layers merged with overrides): printable and
    argv-sized; nesting shallow; only plain YAML types (a `!!binary` or `!!set` is no profile value)."""
    import datetime as dt

    if depth > 16:
        raise ApplianceError(f"{prefix.rstrip('.') or 'document'}: nested more than 16 levels deep",
                             field=prefix.rstrip(".") or None, fix="a profile has sections of plain values",
                             reason="no profile field is that deep; deep nesting only costs time and stack")
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}{key}" if isinstance(key, str) else f"{prefix}{show(key)}"
            if not isinstance(key, str):
                raise ApplianceError(f"{name}: key {show(key)} is not text", field=name, value=show(key),
                                     fix="write keys as plain words (section.key)",
                                     reason="profile keys are field names")
            check_text(_label(name, origin_of), key, max_bytes=256)
            check_tree(value, origin_of, f"{name}.", depth + 1)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_tree(value, origin_of, f"{prefix}{i}.", depth + 1)
    elif isinstance(data, str):
        check_text(_label(prefix.rstrip("."), origin_of), data)
    elif not isinstance(data, (*LEAF_TYPES, dt.date)):
        name = prefix.rstrip(".") or "document"
        raise ApplianceError(f"{name}: a {type(data).__name__} is no profile value", field=name,
                             value=show(data), fix="write plain text, numbers, true/false or null",
                             reason="profile fields are text, numbers and booleans")


def _label(path: str, origin_of: Mapping[str, str] | None) -> str:
    origin = origin_of.get(path) if origin_of else None
    return f"{path} ({origin})" if origin else path


def check_port(field: str, value: int, *, low: int = PORT_MIN, high: int = PORT_MAX) -> int:
    if not low <= value <= high:
        raise ApplianceError(f"{field}={show(value)}: outside {low}-{high}", field=field, value=value,
                             fix=f"choose a port from {low} to {high}",
                             reason="a TCP port is 16 bits; 0 means any port, which no peer can find")
    return value


def check_health_port(field: str, health_port: int, api_port: int) -> int:
    """The exporter's port on a node that serves the API (head or single) is not the API's port."""
    if health_port == api_port:
        raise ApplianceError(f"{field}={health_port}: the API port too", field=field, value=health_port,
                             fix="give the exporter another port (--port, APPLIANCE_HEALTH_PORT, server.health_port)",
                             reason="vLLM's API server listens there on this node; one of the two would not start")
    return health_port


def check_master_port(field: str, value: int) -> int:
    """The rendezvous listens on master + 1, so that one must be a port too."""
    return check_port(field, value, low=1024, high=MAX_MASTER_PORT)


_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def is_host(value: str) -> bool:
    """An IPv4/IPv6 address (brackets allowed) or an RFC 1123 host name (a last label all digits is a bad IP)."""
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        pass
    name = value.removesuffix(".")
    return bool(name) and len(name) <= 253 and all(_LABEL.match(part) for part in name.split(".")) \
        and not name.split(".")[-1].isdigit()


def check_host(field: str, value: str) -> str:
    check_text(field, value, max_bytes=256)
    if is_host(value):
        return value
    raise ApplianceError(f"{field}={show(value)}: neither an IP address nor a host name", field=field,
                         value=show(value), fix="give an IPv4/IPv6 address or a DNS name (letters, digits, '-', '.')",
                         reason="the address goes to vLLM, NCCL and the rendezvous, which resolve it as a host")


def is_http_url(value: str) -> bool:
    """http(s)://HOST[:PORT][/path]: a host that is an address or a name, a port in range, no credentials."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or PORT_MIN <= parts.port <= PORT_MAX
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok \
        and is_host(parts.hostname) and not parts.username and not parts.password


def check_http_url(field: str, value: str) -> str:
    check_text(field, value, max_bytes=8192)
    if not is_http_url(value):
        raise ApplianceError(f"{field}={show(value)}: not an http(s) URL", field=field, value=show(value),
                             fix="write e.g. http://127.0.0.1:8000 (credentials go in VLLM_API_KEY, not the URL)",
                             reason="the appliance only speaks HTTP to the serve and its exporter")
    return value


def api_base_url(value: str) -> str:
    """The serve's base URL as the appliance joins paths to it: an OpenAI client's base URL (`…/v1`) taken as well,
    so `--url http://host:8000/v1` never becomes `…/v1/v1/models`."""
    base = value.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def check_ifname(field: str, value: str) -> str:
    """A Linux interface name: 1-15 bytes, not `.`/`..`, no `/`, `:` or whitespace (the kernel's dev_valid_name)."""
    check_text(field, value, max_bytes=256)
    if value in (".", "..") or not value or any(c in value for c in "/: ") or len(value.encode()) >= IFNAMSIZ:
        raise ApplianceError(f"{field}={show(value)}: not a network interface name", field=field, value=show(value),
                             fix="name the interface as `ip -br link` lists it (e.g. enp1s0f0np0)",
                             reason="Linux interface names are 1-15 bytes without '/', ':' or spaces")
    return value


def check_fabric_ifnames(field: str, value: str) -> str:
    """One interface name for every rank, or one per rank: `0=enp1s0f1np1,1=enP2p1s0f1np1` (a GB10 pair often names
    its ConnectX ports differently). Each rank once, each name an interface name."""
    if "=" not in value:
        return check_ifname(field, value)
    seen: set[int] = set()
    for part in value.split(","):
        rank, eq, name = part.strip().partition("=")
        if not eq or not rank.isdigit() or not 0 <= int(rank) < MAX_NODES or int(rank) in seen:
            raise ApplianceError(f"{field}={show(value)}: {show(part)} is not RANK=INTERFACE with a new rank "
                                 f"0-{MAX_NODES - 1}", field=field, value=show(value),
                                 fix="write one interface for all ranks, or RANK=IF pairs: "
                                     "0=enp1s0f1np1,1=enP2p1s0f1np1",
                                 reason="each rank finds its fabric by its own interface name")
        seen.add(int(rank))
        check_ifname(field, name.strip())
    return value


def fabric_ifname_for(field: str, value: str | None, node_rank: int) -> str | None:
    """This rank's fabric interface from a check_fabric_ifnames value (None stays None)."""
    if value is None or "=" not in value:
        return value
    names = {int(r): n.strip() for r, _, n in (p.strip().partition("=") for p in value.split(","))}
    if node_rank not in names:
        raise ApplianceError(f"{field}={show(value)} names no interface for rank {node_rank}", field=field,
                             value=show(value), fix=f"add {node_rank}=IFNAME (as `ip -br link` lists it on that node)",
                             reason="each rank finds its fabric by its own interface name")
    return names[node_rank]

