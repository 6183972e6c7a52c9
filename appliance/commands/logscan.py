"""`appliance logscan LOG [LOG…] --profile P`: read serve logs back — facts, each expectation
with its K id, fatal lines — and give a verdict (exit 0 pass, 1 fail). Several logs are the ranks
of one multi-node serve, head first: each is judged for its role, then compared across ranks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from appliance.cliargs import add_profile_args, load_from_args, placement_from_args
from appliance.health.context import HealthContext
from appliance.health.expect import show_value
from appliance.health.facts import Facts
from appliance.health.peers import agreements, compared_facts, ranks_printing
from appliance.health.report import ALL_LOGS, LogFinding, LogReport, cross_rank_report, log_report
from appliance.health.scan import scan_file
from appliance.redact import clip, redact_tree


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG",
                        help="serve log(s); several = the ranks of one serve, head (rank 0) first")
    add_profile_args(parser, positional=False)
    parser.add_argument("--node-rank", type=int, default=None,
                        help="rank of the first LOG (default $APPLIANCE_NODE_RANK or 0)")
    parser.add_argument("--table", type=Path, help="log-check table (default healthchecks/logchecks.yaml)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    ctx = HealthContext.load(loaded, args.table)
    given = placement_from_args(args, settings).node_rank  # flags over APPLIANCE_NODE_RANK: the one rule
    first = 0 if given is None else given
    logs = []
    report = LogReport([], log_ready=True)
    for offset, log in enumerate(args.logs):
        role = ctx.role(first + offset)
        judge = ctx.judge(role, first + offset)
        facts = scan_file(log, ctx.table)
        one = log_report(str(log), judge.evaluate(facts), facts, judge.readiness_evidence(), finished=True)
        report += one
        logs.append((log, role, facts, one))
    if len(args.logs) > 1:
        per_rank = {str(log): facts.values for log, _, facts, _ in logs}
        printing = ranks_printing(ctx.table, loaded.profile, [first + i for i in range(len(args.logs))])
        printed = {str(log): printing[first + i] for i, (log, *_rest) in enumerate(logs)}
        report += cross_rank_report(agreements(compared_facts(ctx.table), per_rank, printed))
    verdict = report.verdict
    if args.json:  # the log's free text (versions, reasons, fatal lines) passes the one redaction
        print(json.dumps(redact_tree({
            "verdict": verdict,
            "profile": {"name": loaded.profile.name, "digest": loaded.digest},
            "channel": ctx.lock.name,
            "lock_digest": ctx.lock_digest,
            "logs": [{"path": str(log), "role": role, "log_ready": one.log_ready, "verdict": one.verdict,
                      "runs": facts.runs, "lines": facts.lines_read, "facts": facts.to_json(),
                      "fatal_during_shutdown": [h.to_json() for h in facts.quiet.values()]}
                     for log, role, facts, one in logs],
            "findings": [f.to_json() for f in report.findings],
        }), indent=2))
    else:
        for log, role, facts, _ in logs:
            _print_log(log, role, facts, report.of_log(str(log)))
        for f in report.of_log(ALL_LOGS):
            print(f"FAIL    {f.rule:<4} {f.name}: {clip(f.detail)}")
        print(f"verdict: {verdict}")
    return 0 if verdict == "pass" else 1


def _print_log(log: Path, role: str, facts: Facts, findings: list[LogFinding]) -> None:
    """Every value that came from the log is shown through clip(): masked, escaped (a log line cannot move the
    cursor or reorder the text after it), cut to one screen line."""
    print(f"== {clip(str(log))} (role {role}, {facts.lines_read:,} lines, engine runs {facts.runs})")
    for name, value in facts.to_json().items():
        print(f"  {name:<30} {clip(show_value(value), 200):<24} line {facts.lines.get(name)}")
    for f in findings:
        label = f.status.upper() if f.severity == "error" or f.status != "fail" else "WARN"
        print(f"{label:<7} {f.rule:<4} {f.name}: {clip(f.detail)}")
        if f.warning:
            print(f"        warning: {clip(f.warning)}")
        if f.fix and f.status == "fail":
            print(f"        fix: {clip(f.fix)}")
        if f.text:
            print(f"        > {clip(f.text, 500)}")
    for hit in facts.quiet.values():
        print(f"quiet   {hit.rule:<4} {hit.id} at line {hit.line} (x{hit.count}): during a requested shutdown")
