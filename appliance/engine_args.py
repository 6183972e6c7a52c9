"""Check a rendered serve argv with vLLM's OWN argument parser (no re-implementation of its flags).

The parser is built the way `vllm serve` builds it (vllm/entrypoints/cli/main.py): a top-level
`FlexibleArgumentParser` with the `serve` subcommand from `vllm.entrypoints.cli.serve`, whose
`make_arg_parser` (vllm/entrypoints/launchers/cli_args.py) adds the optional positional
`model_tag` and every Frontend/AsyncEngineArgs flag. After parsing, the subcommand's own
`validate` runs (e.g. `--enable-auto-tool-choice` requires `--tool-call-parser`), and, as
`ServeSubcommand.cmd` does, a positional `model_tag` becomes `model`.

vLLM is imported lazily (≈ 5 s on the CPU build) and the parser is built once per process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from functools import cache
from typing import Any

__all__ = ["parse_serve_argv"]


@cache
def _serve_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The `vllm` top-level parser with only the `serve` subcommand, and that subcommand."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(subparsers)
    return parser, serve


def _strip_launcher(argv: list[str]) -> list[str]:
    """`["vllm", "serve", model, ...]` (or `["serve", model, ...]`) -> `[model, ...]`."""
    rest = list(argv)
    if rest and os.path.basename(rest[0]) == "vllm":
        rest = rest[1:]
    if not rest or rest[0] != "serve":
        raise ValueError(f"not a `vllm serve` command line: {argv[:3]!r}…")
    return rest[1:]


def _error_text(captured: str, code: object) -> str:
    """vLLM's own message: the `error:` line(s) argparse printed, without the long usage block."""
    lines = captured.strip().splitlines()
    for i, line in enumerate(lines):
        if ": error: " in line:
            return "\n".join(lines[i:]).strip()
    tail = "\n".join(lines[-5:]).strip()
    return tail or f"vLLM's argument parser exited with status {code!r}"


def _check_registered_names(parsed: dict[str, object]) -> None:
    """Names the parser takes as free strings but vLLM resolves later against its registries.

    vLLM checks these only at API-server setup (`validate_api_server_args`, the tool parser only
    with `--enable-auto-tool-choice`) or when the tokenizer loads; a typo would pass the parser
    and fail minutes into a start. A name served by a `--*-plugin` file is not checked here.
    """
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers.registry import TokenizerRegistry
    from vllm.tool_parsers import ToolParserManager

    tool = parsed.get("tool_call_parser")
    if tool and not parsed.get("tool_parser_plugin"):
        known = ToolParserManager.list_registered()
        if tool not in known:
            raise ValueError(f"invalid tool call parser: {tool} (chose from {{ {','.join(known)} }})")
    reasoning = parsed.get("reasoning_parser")
    if reasoning and not parsed.get("reasoning_parser_plugin"):
        known = ReasoningParserManager.list_registered()
        if reasoning not in known:
            raise ValueError(f"invalid reasoning parser: {reasoning} (chose from {{ {','.join(known)} }})")
    mode = parsed.get("tokenizer_mode")
    if mode and mode != "auto" and mode not in TokenizerRegistry.tokenizers:
        known = ["auto", *sorted(TokenizerRegistry.tokenizers)]
        raise ValueError(f"No tokenizer registered for tokenizer_mode={mode!r} (chose from {{ {','.join(known)} }})")


def parse_serve_argv(argv: list[str]) -> dict[str, object]:
    """Parse a rendered `vllm serve` argv with vLLM's parser and return the parsed options.

    Raises ValueError carrying vLLM's own message when vLLM rejects the command line (unknown
    flag, invalid choice, bad JSON, failed serve validation), or when a tool/reasoning parser or
    tokenizer mode is not registered in this vLLM build.
    """
    args = _strip_launcher(argv)
    parser, serve = _serve_parser()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            namespace = parser.parse_args(["serve", *args])
    except SystemExit as exc:
        raise ValueError(_error_text(err.getvalue() or out.getvalue(), exc.code)) from None
    except (TypeError, ValueError) as exc:  # FlexibleArgumentParser raises some directly
        raise ValueError(str(exc)) from None
    try:
        serve.validate(namespace)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None

    parsed = {k: v for k, v in vars(namespace).items() if k not in ("dispatch_function", "subparser")}
    if parsed.get("model_tag") is not None:  # as ServeSubcommand.cmd does
        parsed["model"] = parsed["model_tag"]
    _check_registered_names(parsed)
    return parsed
