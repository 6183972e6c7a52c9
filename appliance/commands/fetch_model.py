"""`appliance fetch-model [PROFILE]`: download the profile's checkpoint into the shared HF cache.

huggingface_hub resumes partial downloads and shows a progress bar; HF_TOKEN is read by the
library from the environment and never printed.
"""

from __future__ import annotations

import argparse

from appliance.cliargs import add_profile_args, load_from_args


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("an integer from 1 to 64") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError("an integer from 1 to 64 (parallel downloads)")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    add_profile_args(parser)
    parser.add_argument("--max-workers", type=_workers, default=8, help="parallel file downloads (1-64)")


def run(args: argparse.Namespace) -> int:
    import os

    from appliance.errors import ApplianceError
    from appliance.run.model_location import hf_offline

    profile = load_from_args(args).profile
    if hf_offline():
        raise ApplianceError(f"HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']}: this machine is set not to reach the hub",
                             field="HF_HUB_OFFLINE", value=os.environ.get("HF_HUB_OFFLINE"),
                             fix="unset HF_HUB_OFFLINE on a machine that can reach the hub, or copy the checkpoint "
                                 "and set APPLIANCE_MODEL_DIR")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError as exc:
        raise ApplianceError(f"huggingface_hub is not installed: {exc}", fix="pip install huggingface_hub") from None
    try:
        path = snapshot_download(profile.model.checkpoint, revision=profile.model.revision,
                                 max_workers=args.max_workers)
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ApplianceError(f"download of {profile.model.checkpoint} failed: {type(exc).__name__}: {exc}",
                             field="model.checkpoint", value=profile.model.checkpoint,
                             fix="check the network, HF_TOKEN (gated repositories) and model.revision; rerun to "
                                 "resume") from None
    print(path)
    return 0
