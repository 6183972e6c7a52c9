"""Argument types of `appliance exporter`: each refuses a value the poll loop or the HTTP server could not live
with (a port out of range, a zero, negative, NaN or endless interval, a URL that is no http(s) URL, a log that
is a FIFO or a folder), so argparse exits 2 naming the flag before anything starts."""

from __future__ import annotations

import argparse
import math
import os
import stat
from pathlib import Path

from appliance.bounds import MAX_ARG_BYTES, MAX_NODES, PORT_MAX, PORT_MIN, control_char, is_host, is_http_url, show

MAX_SECONDS = 86_400.0
"""A day: no interval or timeout of the exporter is meaningfully longer, and Event.wait() overflows on 1e300."""


def _text(value: str) -> str:
    bad = control_char(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"{show(value)} holds the control character {bad[1]!r}; "
                                         f"give one line of printable text")
    if len(value.encode("utf-8", "surrogatepass")) >= MAX_ARG_BYTES:
        raise argparse.ArgumentTypeError(f"{show(value)} is over 128 KiB")
    return value


def port(text: str) -> int:
    try:
        value = int(_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a port number ({PORT_MIN}-{PORT_MAX})") from None
    if not PORT_MIN <= value <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"{show(text)} is outside {PORT_MIN}-{PORT_MAX}; choose a free TCP port")
    return value


def rank(text: str) -> int:
    try:
        value = int(_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a node rank (0-{MAX_NODES - 1})") from None
    if not 0 <= value < MAX_NODES:
        raise argparse.ArgumentTypeError(f"{show(text)} is outside 0-{MAX_NODES - 1} (0 = the head)")
    return value


def seconds(text: str) -> float:
    """A positive, finite duration of at most a day."""
    try:
        value = float(_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{show(text)} must be more than 0 and at most {MAX_SECONDS:g} seconds: "
                                         f"the poll loop waits this long between rounds")
    return value


def http_url(text: str) -> str:
    """http(s)://HOST[:PORT][/path] with a host that is an address or a name."""
    if not is_http_url(_text(text)):
        raise argparse.ArgumentTypeError(f"{show(text)} is not an http(s) URL; write e.g. http://127.0.0.1:8000")
    return text


def bind_host(text: str) -> str:
    if not is_host(_text(text)):
        raise argparse.ArgumentTypeError(f"{show(text)} is neither an IP address nor a host name")
    return text


def peer(text: str) -> str:
    """RANK=URL of a worker's exporter (a worker's rank: 1 .. MAX_NODES - 1)."""
    head, sep, url = _text(text).partition("=")
    if not sep or not head.isascii() or not head.isdigit() or len(head) > 2 \
            or not 1 <= int(head) < MAX_NODES:
        from appliance.profile.model import DEFAULT_HEALTH_PORT  # its one owner; only on this error path (pydantic)

        raise argparse.ArgumentTypeError(f"{show(text)} is not RANK=URL with a worker rank 1-{MAX_NODES - 1}, "
                                         f"e.g. 1=http://10.0.0.2:{DEFAULT_HEALTH_PORT}")
    http_url(url)
    return text


def log_file(text: str) -> Path:
    """The serve log: a regular file, or not there yet (the engine creates it). A FIFO would block the poll
    loop's open(); a folder is no log."""
    path = Path(_text(text))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{show(text)}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise argparse.ArgumentTypeError(f"{show(text)} is not a regular file (the serve log the engine writes)")
    return path
