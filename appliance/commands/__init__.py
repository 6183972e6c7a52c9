"""Subcommands of `appliance`: each module has register(parser) and run(args) -> int."""
