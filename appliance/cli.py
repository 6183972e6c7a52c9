"""The `appliance` command: thin. Each subcommand lives in appliance/commands/<name>.py with
``register(subparsers)`` and ``run(args) -> int``; modules are imported only when chosen, so a
probe-like command never pays for pydantic or vLLM."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from appliance import __version__

# name -> (module, one-line help). Order is the order of `appliance --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "profiles": ("appliance.commands.profiles", "table of serve profiles; --host: which one fits this machine"),
    "validate": ("appliance.commands.validate", "check a profile against every known pitfall"),
    "rules": ("appliance.commands.rules", "every rule id (K1...): why, fix, and where it is enforced"),
    "config": ("appliance.commands.config", "effective config with each value's origin"),
    "render": ("appliance.commands.render", "the exact serve command (shell or json)"),
    "versions": ("appliance.commands.versions", "the version lock; --check compares installed packages"),
    "channels": ("appliance.commands.channels", "engine channels: each a locked engine line and its facts; diff A B"),
    "images": ("appliance.commands.images", "each channel's image references (per platform), from the lock"),
    "engine": ("appliance.commands.engine", "a channel's engine on this host: install CHANNEL, list"),
    "doctor": ("appliance.commands.doctor", "preflight: GPU, memory, stale engine, version drift; --suggest: of the "
                                             "profile this host should run"),
    "run": ("appliance.commands.run", "container entrypoint: validate, doctor, render, exec supervisord"),
    "fetch-model": ("appliance.commands.fetch_model", "the profile's pinned checkpoint in the HF cache, verified"),
    "sync-model": ("appliance.commands.sync_model", "copy a verified snapshot to other ranks (rsync), or receive one"),
    "bundle": ("appliance.commands.bundle", "an offline bundle of a profile: create, verify, apply"),
    "smoke-model": ("appliance.commands.smoke_model", "convert the packaged SmolLM2 GGUF for cpu-smoke"),
    "logscan": ("appliance.commands.logscan", "read a serve log back: facts, expectations, fatal lines"),
    "exporter": ("appliance.commands.exporter", "health exporter: /live /ready /status /metrics"),
    "exec": ("appliance.commands.exec_program", "start one program of a launch `run` wrote (supervisord's)"),
    "k8s": ("appliance.commands.k8s", "Kubernetes manifests for a profile"),
    "drain": ("appliance.commands.drain", "before a stop: wait until the engine runs no request (a pod's preStop)"),
    "gate": ("appliance.commands.gate", "acceptance gate against a running serve, writing a receipt"),
    "canary": ("appliance.commands.canary", "one round of golden checks: is the serve's text still right?"),
    "upgrade": ("appliance.commands.upgrade", "move a serve to another engine channel: plan, qualify, promote, "
                                               "rollback, status"),
    "completion": ("appliance.completion", "shell completion script: bash, zsh or tcsh (eval or source it)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse echoes a refused value ("invalid int value: '…'"): a token pasted into the wrong flag would be
    printed. Its messages pass the one redaction (masked, escaped) first; every subcommand's parser is this class."""

    def error(self, message: str) -> NoReturn:
        from appliance.redact import clip

        super().error(clip(message, 2000))


DESCRIPTION = ("Serve DeepSeek-V4-Flash on NVIDIA SM12x (GB10 / DGX Spark, RTX PRO 6000, RTX 5090): pick a profile "
               "that fits this machine (profiles --host), validate it against every known pitfall, render the exact "
               "vLLM serve command, run it with health checks that read the engine's log back, and gate it.")

PASSTHROUGH_COMMANDS = ("render", "run")
"""Commands that take `-- ARGS`: engine flags appended to the profile's engine.extra_args (rules X1-X5)."""


def _parser(chosen: str | None) -> argparse.ArgumentParser:
    parser = _Parser(prog="appliance", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if chosen == name:
            importlib.import_module(module).register(sub.add_parser(name, help=help_text))
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def full_parser() -> argparse.ArgumentParser:
    """Every command registered (what shell completion is generated from); `appliance X` builds only X's."""
    parser = _Parser(prog="appliance", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        importlib.import_module(module).register(sub.add_parser(name, help=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `render PROFILE -- --chat-template X`: what follows the first `--` is engine passthrough (engine.extra_args),
    # taken apart here so that argparse never reads an engine flag as one of ours.
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1:]
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen not in COMMANDS:
        chosen = None
    parser = _parser(chosen)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    if tail and args.command not in PASSTHROUGH_COMMANDS:
        parser.error(f"`-- ARGS` (engine passthrough) is taken by {' and '.join(PASSTHROUGH_COMMANDS)} only, "
                     f"not by {args.command}")
    args.passthrough = tail
    from appliance.errors import ApplianceError

    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except ApplianceError as exc:
        from appliance.redact import redact

        print(f"appliance {args.command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `appliance render … | head`: the reader left; that is not an error of ours.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
