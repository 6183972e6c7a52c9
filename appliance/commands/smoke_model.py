"""`appliance smoke-model [--out DIR]`: convert the packaged SmolLM2 GGUF for the cpu-smoke profile."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", "--dest", dest="dest", type=Path,
                        help="the folder to write (default $APPLIANCE_MODEL_DIR or $APPLIANCE_HOME/models/"
                             "SmolLM2-135M-Instruct); --out as for gate and bundle create, --dest its old spelling, "
                             "kept for a release")


def run(args: argparse.Namespace) -> int:
    from appliance.smoke_model import prepare_smoke_model

    print(prepare_smoke_model(args.dest))
    return 0
