"""`python -m appliance.multinode PROFILE --node-rank N --master-addr ADDR`: only the cross-node check.

What `appliance run` does between render and supervisord, on its own: an operator can check that
two nodes agree before starting anything, and tests drive real ranks through it.
Exit 0 when every node agrees, 2 when refused (the message names the differing field and values).
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from appliance.cliargs import add_placement_args, add_profile_args, load_from_args, placement_from_args
    from appliance.errors import ApplianceError

    parser = argparse.ArgumentParser(prog="python -m appliance.multinode", description=__doc__.splitlines()[0])
    add_profile_args(parser)
    add_placement_args(parser)
    parser.add_argument("--timeout", type=float, help="seconds to wait for the other nodes "
                        "(default $APPLIANCE_RENDEZVOUS_TIMEOUT_S)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        from appliance.multinode.netif import ipv4_of
        from appliance.multinode.rendezvous import preflight
        from appliance.serve.resolve import resolve
        from appliance.settings import load_settings

        settings = load_settings()
        loaded = load_from_args(args, settings)
        serve = resolve(loaded, placement_from_args(args, settings), interface_ip=ipv4_of)
        place, plan = serve.place, serve.plan
        preflight(loaded.profile, plan, place, timeout_s=args.timeout or settings.rendezvous_timeout_s)
    except ApplianceError as exc:
        print(f"appliance multinode: refused: {exc}", file=sys.stderr)
        return 2
    if plan.role == "single":
        print(f"{loaded.profile.name}: a single-node profile, nothing to compare", flush=True)
    else:
        print(f"{loaded.profile.name}: rank {place.node_rank} ({plan.role}) agrees with every node", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
