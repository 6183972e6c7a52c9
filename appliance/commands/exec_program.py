"""`appliance exec --launch RUN_DIR/launch.json PROGRAM`: start one program of a written launch (the
commands supervisord runs: no profile value is on their command line)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--launch", type=Path, required=True, help="the launch.json `appliance run` wrote")
    parser.add_argument("program", help="a program of that launch (vllm, setup0, …)")


def run(args: argparse.Namespace) -> int:
    from appliance.run.launchfile import LaunchFileError, exec_program

    try:
        exec_program(args.launch, args.program)
    except LaunchFileError as exc:
        print(f"appliance exec: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"appliance exec: cannot start {args.program}: {exc}", file=sys.stderr)
        return 2
    return 0  # not reached
