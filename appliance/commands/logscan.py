"""`appliance logscan LOG [LOG…] --profile P`: read serve logs back — facts, each expectation
with its K id, fatal lines — and give a verdict (exit 0 pass, 1 fail). Several logs are the ranks
of one multi-node serve, head first: each is judged for its role, then compared across ranks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from appliance.cliargs import add_profile_args, load_from_args
from appliance.health.context import HealthContext
from appliance.health.expect import Evaluation, show_value
from appliance.health.facts import Facts
from appliance.health.peers import agreements, compared_facts
from appliance.health.scan import scan_file
from appliance.health.table import LogTable


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG",
                        help="serve log(s); several = the ranks of one serve, head (rank 0) first")
    add_profile_args(parser, positional=False)
    parser.add_argument("--node-rank", type=int, default=None,
                        help="rank of the first LOG (default $APPLIANCE_NODE_RANK or 0)")
    parser.add_argument("--table", type=Path, help="log-check table (default healthchecks/logchecks.yaml)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _finding(log: Path, **fields: Any) -> dict[str, Any]:
    return {**fields, "log": str(log)}


def _findings(log: Path, evaluation: Evaluation, facts: Facts, evidence: list[str]) -> list[dict[str, Any]]:
    out = [_finding(log, **r.to_json()) for r in evaluation.results]
    out += [_finding(log, rule=h.rule, name=f"fatal:{h.id}", status="fail", severity="error",
                     detail=f"line {h.line} (x{h.count}): {h.message}", text=h.text) for h in evaluation.fatal]
    if not evaluation.log_ready:
        missing = ", ".join(n for n in evidence if n not in facts)
        out.append(_finding(log, rule="K12", name="log-ready", status="fail", severity="error",
                            detail=f"the log never said ready (no {missing}): nothing it lacks can be judged"))
    return out


def _cross_rank(table: LogTable, logs: list[Path], facts: list[Facts]) -> list[dict[str, Any]]:
    per_rank = {str(log): f.values for log, f in zip(logs, facts, strict=True)}
    return [{"rule": a.rule, "name": f"same-on-every-rank:{a.fact}", "status": "fail", "severity": "error",
             "log": "*", "detail": a.message}
            for a in agreements(compared_facts(table), per_rank) if a.status == "fail"]


def run(args: argparse.Namespace) -> int:
    from appliance.settings import load_settings

    settings = load_settings()
    loaded = load_from_args(args, settings)
    ctx = HealthContext.load(loaded, args.table)
    first = args.node_rank if args.node_rank is not None else settings.node_rank
    reports, findings, all_facts = [], [], []
    for offset, log in enumerate(args.logs):
        role = ctx.role(first + offset)
        judge = ctx.judge(role)
        facts = scan_file(log, ctx.table)
        evaluation = judge.evaluate(facts)
        all_facts.append(facts)
        findings += _findings(log, evaluation, facts, judge.readiness_evidence())
        reports.append((log, role, facts, evaluation))
    if len(args.logs) > 1:
        findings += _cross_rank(ctx.table, args.logs, all_facts)
    verdict = "fail" if any(f["status"] == "fail" and f["severity"] == "error" for f in findings) else "pass"
    if args.json:
        print(json.dumps({
            "verdict": verdict,
            "profile": {"name": loaded.profile.name, "digest": loaded.digest},
            "lock_digest": ctx.lock_digest,
            "logs": [{"path": str(log), "role": role, "log_ready": ev.log_ready, "verdict": ev.verdict,
                      "runs": facts.runs, "lines": facts.lines_read, "facts": facts.to_json(),
                      "fatal_during_shutdown": [h.to_json() for h in facts.quiet.values()]}
                     for log, role, facts, ev in reports],
            "findings": findings,
        }, indent=2))
    else:
        for log, role, facts, _ in reports:
            _print_log(log, role, facts, [f for f in findings if f["log"] == str(log)])
        for f in findings:
            if f["log"] == "*":
                print(f"FAIL    {f['rule']:<4} {f['name']}: {f['detail']}")
        print(f"verdict: {verdict}")
    return 0 if verdict == "pass" else 1


def _print_log(log: Path, role: str, facts: Facts, findings: list[dict[str, Any]]) -> None:
    print(f"== {log} (role {role}, {facts.lines_read:,} lines, engine runs {facts.runs})")
    for name, value in facts.to_json().items():
        print(f"  {name:<30} {show_value(value):<24} line {facts.lines.get(name)}")
    for f in findings:
        label = f["status"].upper() if f["severity"] == "error" or f["status"] != "fail" else "WARN"
        print(f"{label:<7} {f['rule']:<4} {f['name']}: {f['detail']}")
        if f.get("warning"):
            print(f"        warning: {f['warning']}")
        if f.get("fix"):
            print(f"        fix: {f['fix']}")
        if f.get("text"):
            print(f"        > {f['text']}")
    for hit in facts.quiet.values():
        print(f"quiet   {hit.rule:<4} {hit.id} at line {hit.line} (x{hit.count}): during a requested shutdown")
