"""Optional GSM8K through `lm-eval` against the serve's /v1/completions (`local-completions`).

lm-eval loads `openai/gsm8k` from the Hugging Face hub. Where the hub cannot be reached and the data
set is not in the local cache, the check says `unavailable` with the way out, without starting lm-eval.
The result parser reads the JSON lm-eval writes (`<output_path>/<model>/results_<date>.json`).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.gate.context import GateContext
from appliance.gate.result import CheckResult, GateStatus, utc_now
from appliance.gate.sizing import Gsm8kParams
from appliance.gate.tools import install_hint
from appliance.jsonstrict import JsonObject, load_file
from appliance.paths import venv_executable
from appliance.safe_write import open_for_writing

TASK = "gsm8k"
DATASET = "openai/gsm8k"
STRICT, FLEXIBLE = "exact_match,strict-match", "exact_match,flexible-extract"
_OFFLINE_SIGNS = ("offline mode", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectionError",
                  "Couldn't reach", "Failed to resolve", "Max retries exceeded", "Name or service not known",
                  "couldn't find them in the cached files")


def offline() -> bool:
    from appliance.run.model_location import hf_offline

    return hf_offline("HF_DATASETS_OFFLINE")


def dataset_cached() -> bool:
    from appliance.run.model_location import hf_home, hf_hub_cache

    datasets = Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets")
    hub = hf_hub_cache() / f"datasets--{DATASET.replace('/', '--')}"
    return hub.is_dir() or any(datasets.glob("openai___gsm8k*"))


def argv(exe: str, ctx: GateContext, p: Gsm8kParams, out: Path) -> list[str]:
    model_args = [f"model={ctx.model}", f"base_url={ctx.url}/v1/completions", f"num_concurrent={p.num_concurrent}",
                  f"max_retries={p.max_retries}", "tokenized_requests=False",
                  f"max_length={ctx.profile.limits.max_model_len}"]
    if p.max_gen_toks is not None:
        model_args.append(f"max_gen_toks={p.max_gen_toks}")
    if ctx.tokenizer:
        model_args += [f"tokenizer={ctx.tokenizer}", "tokenizer_backend=huggingface"]
    cmd = [exe, "run", "--model", "local-completions", "--model_args", ",".join(model_args), "--tasks", p.task,
           "--num_fewshot", str(p.num_fewshot), "--batch_size", "1", "--output_path", str(out)]
    if p.include_path:
        cmd += ["--include_path", p.include_path]
    return [*cmd, "--limit", str(p.limit)] if p.limit else cmd


def parse_results(data: dict[str, Any], task: str = TASK) -> JsonObject:
    """Accuracy (strict-match and flexible-extract, with stderr), shots and samples from an lm-eval results JSON."""
    results = data.get("results")
    if not isinstance(results, dict) or not isinstance(results.get(task), dict):
        raise ValueError(f"no results.{task} in the lm-eval output")
    r = results[task]

    def num(key: str) -> float | None:
        value = r.get(key)
        return round(float(value), 4) if isinstance(value, int | float) else None

    samples = (data.get("n-samples") or {}).get(task) or {}
    return {"strict_match": num(STRICT), "strict_match_stderr": num("exact_match_stderr,strict-match"),
            "flexible_extract": num(FLEXIBLE), "flexible_extract_stderr": num("exact_match_stderr,flexible-extract"),
            "num_fewshot": (data.get("n-shot") or {}).get(task), "samples": samples.get("effective"),
            "samples_in_task": samples.get("original"), "lm_eval_version": data.get("lm_eval_version")}


def latest_results(out: Path) -> Path | None:
    found = sorted(out.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _result(status: GateStatus, summary: str, p: Gsm8kParams, started: str, began: float, **more: Any) -> CheckResult:
    return CheckResult("gsm8k", status, summary, started_at=started, seconds=time.monotonic() - began,
                       params={"task": p.task, "num_fewshot": p.num_fewshot, "limit": p.limit,
                               "num_concurrent": p.num_concurrent, "max_gen_toks": p.max_gen_toks,
                               "max_retries": p.max_retries, "min_accuracy": p.min_accuracy,
                               "model": "local-completions", "include_path": p.include_path, "runs": p.runs},
                       **more)


def combine_runs(runs: list[JsonObject]) -> JsonObject:
    """Several lm-eval runs of one serve as one result: accuracies averaged, each run's kept (`*_runs`), and the
    stderr of the mean where every run has one (else None: unknown, never 0)."""
    if len(runs) == 1:
        return {**runs[0], "strict_match_runs": [runs[0].get("strict_match")],
                "flexible_extract_runs": [runs[0].get("flexible_extract")]}
    out = dict(runs[0])
    for key in ("strict_match", "flexible_extract"):
        values = [r.get(key) for r in runs]
        out[f"{key}_runs"] = values
        known = [v for v in values if v is not None]
        out[key] = round(sum(known) / len(known), 4) if len(known) == len(values) else None
        errs = [r.get(f"{key}_stderr") for r in runs]
        out[f"{key}_stderr"] = (round(math.sqrt(sum(e * e for e in errs)) / len(errs), 4)
                                if all(e is not None for e in errs) else None)
    return out


def judge(metrics: JsonObject, p: Gsm8kParams) -> tuple[GateStatus, str]:
    strict = metrics.get("strict_match")
    if strict is None:
        return "error", "lm-eval wrote no strict-match accuracy"
    text = (f"strict-match {strict:.3f}, flexible-extract {metrics.get('flexible_extract') or 0:.3f} "
            f"({metrics.get('num_fewshot')}-shot, {metrics.get('samples')} samples)")
    if strict < p.min_accuracy:
        return "fail", f"{text}; below {p.min_accuracy:.2f}"
    return "pass", text


def lm_eval_env(environ: dict[str, str]) -> dict[str, str]:
    """lm-eval's local-completions reads its key only from OPENAI_API_KEY: the serve's key goes there (the env,
    never argv, where `ps` shows it). Without VLLM_API_KEY it gets none: a user's own OpenAI key is never sent
    to the serve."""
    env = {k: v for k, v in environ.items() if k != "OPENAI_API_KEY"}
    if environ.get("VLLM_API_KEY"):
        env["OPENAI_API_KEY"] = environ["VLLM_API_KEY"]
    return env


def run(ctx: GateContext) -> CheckResult:
    p = ctx.params.gsm8k
    started, began = utc_now(), time.monotonic()
    exe = venv_executable("lm_eval") or venv_executable("lm-eval")
    if exe is None:
        return _result("unavailable", f"lm-eval is not installed here ({install_hint('lm-eval')})", p, started, began)
    if p.include_path is None and offline() and not dataset_cached():
        return _result("unavailable", f"GSM8K needs the {DATASET} data set from the Hugging Face hub, which this "
                       f"host cannot reach (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE set, not in the local cache): run "
                       f"the gate where the hub is reachable, or fetch the data set into the HF cache first",
                       p, started, began)
    env = lm_eval_env(dict(os.environ))
    measured, files, cmd = [], [], []
    for run_index in range(p.runs):
        out = ctx.out_dir / ("lm-eval" if p.runs == 1 else f"lm-eval-run{run_index + 1}")
        cmd = argv(exe, ctx, p, out)
        label = f"run {run_index + 1}/{p.runs}: " if p.runs > 1 else ""
        ctx.progress.step(f"{label}lm-eval {p.task} {p.num_fewshot}-shot" + (f", limit {p.limit}" if p.limit else ""))
        log = out.with_suffix(".log")
        with open_for_writing(log, field="--out") as sink:
            try:
                rc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout=p.timeout_s, check=False,
                                    env=env).returncode
            except subprocess.TimeoutExpired:
                return _result("error", f"lm-eval timed out after {p.timeout_s:.0f} s", p, started, began,
                               details={"argv": cmd, "timed_out": True})
        tail = log.read_text(errors="replace")[-6000:]
        found = latest_results(out)
        if rc != 0 or found is None:
            if any(sign in tail for sign in _OFFLINE_SIGNS):
                return _result("unavailable", f"lm-eval could not load {DATASET} from the hub (offline?); see {log}",
                               p, started, began, details={"argv": cmd})
            last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
            return _result("error", f"lm-eval exited {rc}: {last[:200]}", p, started, began, details={"argv": cmd})
        try:
            results = load_file(found, "lm-eval result", 64 << 20, "lm-eval result")
        except ApplianceError as exc:
            return _result("error", f"lm-eval's results are unreadable: {exc.message}", p, started, began,
                           details={"argv": cmd})
        measured.append(parse_results(results, p.task))
        files.append(str(found))
    metrics = combine_runs(measured)
    status, summary = judge(metrics, p)
    if p.runs > 1:
        summary += f"; runs {', '.join(f'{v:.3f}' for v in metrics['strict_match_runs'] if v is not None)}"
    return _result(status, summary, p, started, began, metrics=metrics,
                   details={"argv": cmd, "results_file": files[-1], "results_files": files})
