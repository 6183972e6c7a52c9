"""`appliance gate [run]`: run the acceptance checks against a running serve and write a receipt; `appliance gate
compare|paired|serves|battery|report`: judge or draw receipts (compare: differences judged by the seed's noise rules).
`gate --help` is the group's short help; `gate run --help` lists every flag of a run, per check."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from appliance.cliargs import add_profile_args
from appliance.gate.sizing import CHECKS, DEFAULT_CHECKS


def _fraction(text: str) -> float:
    value = float(text)  # NaN fails the comparison below; argparse turns a ValueError into its own refusal
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError("a fraction between 0 and 1")
    return value


def _count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from `low` to `high` (a count that reaches a tool's command line)."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"an integer from {low} to {high}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"an integer from {low} to {high}")
        return value

    return count


_positive = _count(1, 10_000)


GROUP_HELP = """\
run the checks against a serve and write a receipt (the default action):
  appliance gate [run] [--url URL] [--profile P] [--checks C,...] [--out DIR]
  appliance gate [run] --battery seed [--arm default|v1|noguard]
  every flag of a run, per check: appliance gate run --help
judge or draw receipts: the actions below (appliance gate ACTION --help)"""


def _run_flags(parser: argparse.ArgumentParser, *, every: bool) -> None:
    """The flags of a gate run: on `gate run` each with its help, grouped by check (`every`); on `gate` itself too (the
    bare form runs the gate) but left out of its help, which stays the group's short one."""
    def shown(text: str) -> str:
        return text if every else argparse.SUPPRESS

    serve = parser.add_argument_group("the serve") if every else parser
    serve.add_argument("--url", help=shown("the serve's API server, with or without /v1 (default "
                                           "http://127.0.0.1:<server.port>)"))
    serve.add_argument("--exporter", help=shown("the health exporter (default http://127.0.0.1:<server.health_port>); "
                                                "without a profile given, the gate asks it which one the serve runs"))
    add_profile_args(serve, positional=False)  # type: ignore[arg-type]
    if not every:
        for action in parser._actions:
            if action.dest in ("profile", "overrides"):
                action.help = argparse.SUPPRESS
    serve.add_argument("--checks", help=shown(f"comma-separated, from {','.join(CHECKS)} "
                                              f"(default {','.join(DEFAULT_CHECKS)})"))
    serve.add_argument("--out", type=Path, help=shown("receipt folder (default "
                                                      "$APPLIANCE_HOME/receipts/PROFILE-TIME)"))
    battery = parser.add_argument_group("an acceptance battery") if every else parser
    battery.add_argument("--battery", metavar="NAME", help=shown(
        "run a whole acceptance battery instead of --checks: `seed` is jasl/vllm-ds4-sm120-harness's final acceptance "
        "(what `validated` means; docs/gate.md)"))
    battery.add_argument("--arm", default="default", help=shown(
        "the battery's serve this is: default, v1 (started with engine.runner=v1) or noguard (cache.guard=0); "
        "`gate battery` judges the arms' receipts together"))
    battery.add_argument("--bench-reference", type=Path, metavar="RECEIPT",
                         help=shown("battery C10: the receipt whose pp2048 @ d8192 is the reference (default: the "
                                    "harness's GB10 figure, 1471.8 t/s; none elsewhere)"))
    tools = parser.add_argument_group("bench (llama-benchy) and the tokenizer") if every else parser
    tools.add_argument("--bench-protocol", metavar="NAME", help=shown(
        "run an anchor's published bench shapes: lil, nepenth or seed (appliance/gate/anchors.yaml), scaled (and said "
        "so) on the CPU serve; `gate report` draws the rows beside the anchor's figures. Runs the bench check alone "
        "unless --checks names more"))
    tools.add_argument("--tokenizer", help=shown("local tokenizer folder for llama-benchy/lm-eval "
                                                 "(default: the checkpoint on disk)"))
    tools.add_argument("--bench-corpus", help=shown("llama-benchy text: builtin (offline), default (its own book), "
                                                    "or a text file"))
    tools.add_argument("--bench-runs", type=_positive, help=shown("llama-benchy --runs"))
    recall = parser.add_argument_group("recall") if every else parser
    recall.add_argument("--recall-concurrency", type=_positive, help=shown("recall requests sent at once"))
    recall.add_argument("--recall-min", type=_fraction, help=shown("recall pass line, fraction of needles found"))
    recall.add_argument("--recall-runs", type=_positive, help=shown(
        "recall runs on this serve (the seed: 3 on each of 4 fresh serves; see `gate serves`)"))
    gsm8k = parser.add_argument_group("GSM8K (lm-eval)") if every else parser
    gsm8k.add_argument("--gsm8k-limit", type=_positive, help=shown("lm-eval --limit"))
    gsm8k.add_argument("--gsm8k-fewshot", type=_count(0, 64), help=shown("lm-eval --num_fewshot (default 8)"))
    gsm8k.add_argument("--gsm8k-task", help=shown("lm-eval task name (default gsm8k)"))
    gsm8k.add_argument("--gsm8k-include", help=shown("lm-eval --include_path: folder of task YAMLs (local data sets)"))
    gsm8k.add_argument("--gsm8k-runs", type=_positive, help=shown("lm-eval runs on this serve (the seed resolved a "
                                                                  "difference with three runs per cell)"))


def register(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = GROUP_HELP
    _run_flags(parser, every=False)
    sub = parser.add_subparsers(dest="gate_action", metavar="[run|compare|paired|serves|battery|report]")
    run_ = sub.add_parser("run", help="run the checks against a serve and write a receipt (also: plain `gate`)")
    _run_flags(run_, every=True)
    for action in run_._actions:  # a flag not given after `run` leaves what was given before it, or gate's default
        action.default = argparse.SUPPRESS
    cmp = sub.add_parser("compare", help="compare two receipts (exit 1 on a regression)")
    cmp.add_argument("a", type=Path, help="the reference receipt.json")
    cmp.add_argument("b", type=Path, help="the receipt.json to judge")
    cmp.add_argument("--json", action="store_true", help="machine-readable findings")
    cmp.add_argument("--across-channels", action="store_true",
                     help="compare receipts of serves on different engine channels (refused without it: another "
                          "engine line differs in more than the change under test)")
    par = sub.add_parser("paired", help="blocked, paired builds: exact sign-flip test per bench cell, Holm-corrected")
    par.add_argument("blocks", nargs="+", metavar="A.json:B.json", help="one pair of receipts per block")
    par.add_argument("--json", action="store_true", help="machine-readable result")
    srv = sub.add_parser("serves", help="judge recall over receipts of several fresh serves (the seed's design)")
    srv.add_argument("receipts", type=Path, nargs="+", help="one receipt.json per fresh serve")
    srv.add_argument("--against", type=Path, nargs="+", metavar="RECEIPT",
                     help="the reference arm of fresh serves to judge these against: exact Mann-Whitney U on the "
                          "serve means, exit 1 when these sit lower")
    srv.add_argument("--json", action="store_true", help="machine-readable verdict")
    bat = sub.add_parser("battery", help="judge a battery over its arms' receipts (exit 0 accepted, 1 not)")
    bat.add_argument("receipts", type=Path, nargs="+", help="the receipt of each arm (default, v1, noguard)")
    bat.add_argument("--json", action="store_true", help="machine-readable verdict")
    rep = sub.add_parser("report", help="draw receipts as one self-contained HTML page (plots, bands, verdicts), and "
                                        "bench-protocol rows beside the anchors' published figures")
    rep.add_argument("receipts", type=Path, nargs="+", help="receipt.json files: builds, channels or fresh serves")
    rep.add_argument("--html", type=Path, metavar="FILE", help="the page to write (without it: the anchor rows as "
                                                             "text, or --json)")
    rep.add_argument("--json", action="store_true", help="the anchor rows (gate --bench-protocol receipts) as JSON")
    rep.add_argument("--title", default="Gate receipts", help="the page's title")


def _compare(args: argparse.Namespace) -> int:
    from appliance.gate.compare import compare, label, render
    from appliance.gate.receipt import load

    a, b = load(args.a), load(args.b)
    result = compare(a, b, across_channels=args.across_channels)
    print(json.dumps(result.to_json(), indent=2, default=str) if args.json else render(result, label(a), label(b)))
    return 1 if result.regressions else 0


def _serves(args: argparse.Namespace) -> int:
    from appliance.gate.receipt import load
    from appliance.gate.serves import judge_receipts, render

    if args.against:
        from appliance.gate.arms import judge_arms
        from appliance.gate.arms import render as render_arms

        arms = judge_arms([(str(p), load(p)) for p in args.against], [(str(p), load(p)) for p in args.receipts])
        print(json.dumps(arms.to_json(), indent=2) if args.json else render_arms(arms))
        return 1 if arms.verdict == "regression" else 0
    result = judge_receipts([(str(p), load(p)) for p in args.receipts])
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result))
    return EXIT[result.verdict]


def _battery(args: argparse.Namespace) -> int:
    from appliance.gate.battery.merge import judge_receipts, render
    from appliance.gate.receipt import load

    loaded = [(str(p), load(p)) for p in args.receipts]
    battery, lines, result = judge_receipts(loaded)
    if args.json:
        print(json.dumps({"battery": battery.name, **result.to_json(),
                          "lines": [{"name": line.name, "status": line.status, "summary": line.summary}
                                    for line in lines]},
                         indent=2))
    else:
        print(render(battery, lines, result, battery.expect))
    return 0 if result.accepted else 1


def _paired(args: argparse.Namespace) -> int:
    from appliance.errors import ApplianceError
    from appliance.gate.paired import judge_blocks, render
    from appliance.gate.receipt import load

    blocks = []
    for pair in args.blocks:
        a, sep, b = pair.partition(":")
        if not sep or not a or not b:
            raise ApplianceError(f"block {pair!r} is not A.json:B.json", field="blocks", value=pair,
                                 fix="give each block as the A receipt and the B receipt joined by ':'")
        blocks.append((load(Path(a)), load(Path(b))))
    result = judge_blocks(blocks)
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result))
    return 1 if any(c.verdict == "regression" for c in result.cells) else 0


def _report(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from appliance.bounds import check_text
    from appliance.errors import ApplianceError
    from appliance.gate.receipt import load
    from appliance.paths import write_text_atomic
    from appliance.report import anchor_rows
    from appliance.report.from_receipts import labels, views
    from appliance.report.page import render

    check_text("--title", args.title)
    target: Path | None = args.html
    if target is not None and (target.is_dir() or not target.parent.is_dir()):
        raise ApplianceError(f"--html {target}: {'a folder' if target.is_dir() else 'its folder does not exist'}",
                             field="--html", value=str(target), fix="name a file in an existing folder")
    receipts = [load(p) for p in args.receipts]
    names = labels(args.receipts, receipts)
    anchored = anchor_rows.compare(list(zip(names, receipts, strict=True)))
    if target is not None:
        page = render(views(args.receipts, receipts), args.title, f"drawn {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
                      anchor_rows.html(anchored))
        try:
            write_text_atomic(target, page)
        except OSError as exc:
            raise ApplianceError(f"cannot write {target}: {exc.strerror}", field="--html", value=str(target),
                                 fix="name a file you can write") from None
    if args.json:
        print(json.dumps(anchor_rows.to_json(anchored), indent=2))
    elif target is not None:
        print(f"{target}: {len(args.receipts)} receipt(s)"
              + (f", {sum(len(v.rows) for v in anchored)} anchor row(s)" if anchored else ""))
    else:
        print(anchor_rows.text(anchored), end="")
    return 0


EXIT = {"pass": 0, "fail": 1, "inconclusive": 3}
"""`gate` and `gate serves`: inconclusive (recall between its bands) is neither a pass nor a failure (nothing
measured is a bad --checks: exit 2)."""


def _check_flags(args: argparse.Namespace) -> None:
    """Flag values reach llama-benchy's and lm-eval's command lines: the bounds of every outside value."""
    from appliance.bounds import api_base_url, check_http_url, check_text

    for flag in ("url", "exporter"):
        if getattr(args, flag):
            check_http_url(f"--{flag}", getattr(args, flag))
    if args.url:  # an OpenAI client's base URL (…/v1) is taken as the serve's
        args.url = api_base_url(args.url)
    for flag in ("checks", "tokenizer", "bench_corpus", "gsm8k_task", "gsm8k_include", "out", "battery", "arm",
                 "bench_reference", "bench_protocol"):
        if getattr(args, flag) is not None:
            check_text(f"--{flag.replace('_', '-')}", str(getattr(args, flag)))


def run(args: argparse.Namespace) -> int:
    if args.gate_action == "compare":
        return _compare(args)
    if args.gate_action == "serves":
        return _serves(args)
    if args.gate_action == "paired":
        return _paired(args)
    if args.gate_action == "battery":
        return _battery(args)
    if args.gate_action == "report":
        return _report(args)
    from appliance.gate.prepare import TUNABLE, GateRequest, prepare
    from appliance.gate.progress import Progress
    from appliance.gate.receipt_model import verdict_word
    from appliance.gate.runner import run_gate
    from appliance.redact import clip
    from appliance.settings import load_settings

    settings = load_settings()
    _check_flags(args)
    tune = {k: getattr(args, k) for k in TUNABLE}
    request = GateRequest(url=args.url, exporter=args.exporter, profile=args.profile or settings.profile,
                          overrides=args.overrides, env_overrides=settings.overrides(), checks=args.checks,
                          out=args.out, tokenizer=args.tokenizer, model_dir=settings.model_dir, tune=tune,
                          battery=args.battery, arm=args.arm, bench_reference=args.bench_reference,
                          bench_protocol=args.bench_protocol)
    progress = Progress()
    ctx, selected, receipt = prepare(request, progress)
    progress.note(f"{ctx.profile.name} at {ctx.url} ({receipt.size} sizing): {', '.join(selected)}; "
                  f"receipt in {ctx.out_dir}")
    receipt = run_gate(ctx, selected, receipt)
    print(f"{verdict_word(receipt.verdict)}: {ctx.out_dir / 'receipt.json'}")
    if receipt.battery:
        from appliance.gate.battery.merge import check_line
        from appliance.gate.battery.verdict import word
        from appliance.gate.summary import title

        for c in receipt.checks:
            print(check_line(c.name, title(c), word(c.status), clip(c.summary, 500)))
        result = receipt.battery.result
        assert result is not None  # finalize judged it
        print(f"{result.passed}/{result.recorded} PASS on arm {receipt.battery.arm}; "
              + ("ACCEPTED" if result.accepted else f"not accepted: {result.why}"))
        if result.missing:
            print("  the other arms: start their serves and run gate --battery "
                  f"{receipt.battery.name} --arm ARM, then `appliance gate battery` over all receipts")
    else:
        for c in receipt.checks:
            print(f"  {c.name:<10} {c.status:<14} {clip(c.summary, 500)}")  # a summary quotes the serve
    if not receipt.complete:
        return 130
    if receipt.verdict == "nothing_measured":  # the receipt stays: it records what was asked and why nothing ran
        from appliance.errors import ApplianceError

        raise ApplianceError(f"--checks {','.join(selected)}: none of them applies to profile {ctx.profile.name}, "
                             "so the gate measured nothing", field="--checks", value=",".join(selected),
                             fix=f"choose checks that apply to this profile (from {','.join(CHECKS)}), or leave "
                                 "--checks out for the default set", reason="a gate that measured nothing is no pass")
    return EXIT.get(receipt.verdict, 1)
