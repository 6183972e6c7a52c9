"""One canary round: golden probes against an OpenAI-compatible serve, judged on the text users get.

Checks and the signatures they report:

- needle (chat + completions, streamed and not): `needle-missing` — a planted code word not repeated;
  `stream-mismatch` — the streamed reply disagrees with the non-streamed one (twice: a first disagreement
  is asked again after a pause for traffic, which can move a greedy near-tie).
- endpoint-consistency: `endpoint-mismatch` — completions fed the chat prompt's own tokens (vLLM
  /tokenize) disagree with the chat reply. Skipped where the serve has no /tokenize.
- long-decode (completions, chat streamed): `repetition-loop`, `collapsed-vocabulary`,
  `garbage-characters`, `script-switch` (appliance/canary/degeneration.py).
- shared-prefix: one request warms a long prefix, then several share its cached blocks at once, each
  with its own needle: `needle-missing`, `crosstalk` (a reply carries another request's code), and
  the degeneration signatures. (Solo and concurrent replies are not compared text for text: batch
  composition moves late tokens even on a healthy CPU serve.)
- calibrated only: `known-answer-wrong` (a prompt this model answered right on its known-good serve)
  and `golden-divergence` (a greedy reply no longer agrees with the recorded one).

Every probe is greedy (temperature 0, fixed seed). Consistency compares leading characters only
(`consistency_min_prefix_chars`): a GPU's batch order may legitimately move a late token.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from appliance.canary.calibration import Calibration
from appliance.canary.client import CanaryClient, Completion, Endpoint, Prompt
from appliance.canary.degeneration import Thresholds, symptoms
from appliance.canary.golden import Golden
from appliance.jsonstrict import JsonObject
from appliance.redact import clip, redact

CALIBRATED = ("known-answers", "golden")


@dataclass(frozen=True)
class Finding:
    signature: str
    check: str
    evidence: str

    def to_json(self) -> dict[str, str]:
        return {"signature": self.signature, "check": self.check, "evidence": self.evidence}

    def render(self) -> str:
        return f"{self.signature} [{self.check}]: {self.evidence}"


@dataclass(frozen=True)
class RoundPlan:
    """How big a round is: from the profile's `canary:` section, or the command's flags."""

    long_decode_tokens: int = 192
    concurrency: int = 4
    thresholds: Thresholds = field(default_factory=Thresholds)
    reasoning_effort: str | None = None
    """Sent with every chat request (a reasoning model's `none` answers at once: a needle reply is not spent on
    thinking). Set, it also skips endpoint-consistency: /tokenize renders no effort, so the token-for-token
    completions twin would be another prompt."""


@dataclass
class RoundResult:
    model: str
    findings: list[Finding] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Check -> why it did not run."""
    greedy: dict[str, str] = field(default_factory=dict)
    """Probe id -> greedy reply, for the deterministic probes (what a calibration records)."""
    known_right: list[str] = field(default_factory=list)
    completion_tokens: int = 0
    requests: int = 0
    seconds: float = 0.0
    paused_s: float = 0.0
    """Of `seconds`, the time spent paused between steps for real traffic."""
    retried: list[str] = field(default_factory=list)
    """Checks whose two replies disagreed once and were asked again (a finding only if they disagreed again)."""

    @property
    def healthy(self) -> bool:
        return not self.findings

    @property
    def signatures(self) -> list[str]:
        return sorted({f.signature for f in self.findings})

    def to_json(self) -> JsonObject:
        return {"verdict": "healthy" if self.healthy else "corruption", "model": self.model,
                "findings": [f.to_json() for f in self.findings], "signatures": self.signatures,
                "checks": self.checks, "skipped": self.skipped, "requests": self.requests,
                "completion_tokens": self.completion_tokens, "seconds": round(self.seconds, 2),
                "paused_s": round(self.paused_s, 2), "retried": self.retried}


def _clip(text: str, width: int = 120) -> str:
    """A reply as evidence: masked, escaped, cut (a serve's text may carry a secret or a terminal sequence)."""
    return repr(clip(text, width))


def agreeing_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def agree(a: str, b: str, min_chars: int) -> bool:
    """Both replies agree on their first `min_chars` characters (or on all of the shorter one)."""
    return agreeing_prefix(a, b) >= min(min_chars, len(a), len(b))


Pause = Callable[[], Awaitable[float]]
"""Called between a round's steps (no canary request in flight): waits while real traffic runs; seconds waited."""


class Round:
    def __init__(self, client: CanaryClient, model: str, golden: Golden, plan: RoundPlan,
                 calibration: Calibration | None, rng: random.Random, pause: Pause | None = None) -> None:
        self.client, self.model, self.golden, self.plan = client, model, golden, plan
        self.calibration, self.rng, self.pause = calibration, rng, pause
        self.t = plan.thresholds
        self.result = RoundResult(model)

    async def _ask(self, endpoint: Endpoint, prompt: Prompt, max_tokens: int, *,
                   stream: bool = False) -> Completion:
        reply = await self.client.complete(self.model, endpoint, prompt, max_tokens, stream=stream,
                                           reasoning_effort=self.plan.reasoning_effort)
        self.result.requests += 1
        self.result.completion_tokens += reply.tokens or 0
        return reply

    def _find(self, signature: str, check: str, evidence: str) -> None:
        self.result.findings.append(Finding(signature, check, evidence))

    def _degeneration(self, check: str, text: str) -> None:
        for s in symptoms(text, self.t):
            self._find(s.signature, check, s.evidence)

    async def _consistent(self, signature: str, check: str, pair: Callable[[], Awaitable[tuple[str, str]]],
                          first: tuple[str, str], what: str) -> None:
        """Two greedy replies that must agree. A disagreement is asked once more, after a pause for traffic, before
        it counts: real traffic batched with a request moves a greedy near-tie (measured on the CPU serve: a
        streamed/non-streamed needle pair parted within 48 characters under a back-to-back client), while a broken
        path disagrees every time."""
        a, b = first
        if agree(a, b, self.t.consistency_min_prefix_chars):
            return
        self.result.retried.append(check)
        if self.pause:
            self.result.paused_s += await self.pause()
        again = await pair()
        if agree(*again, self.t.consistency_min_prefix_chars):
            return
        at, at2 = agreeing_prefix(a, b), agreeing_prefix(*again)
        self._find(signature, check, f"{what} part at char {at}: {_clip(a[at:], 60)} vs {_clip(b[at:], 60)}; "
                                     f"asked again, at char {at2}")

    async def needle(self) -> None:
        g = self.golden
        for endpoint in ("completions", "chat"):
            code = g.code(self.rng)
            prompt = self._needle_prompt(endpoint, code)

            async def pair(endpoint: Endpoint = endpoint, prompt: Prompt = prompt) -> tuple[str, str]:
                plain = await self._ask(endpoint, prompt, g.needle.max_tokens)
                streamed = await self._ask(endpoint, prompt, g.needle.max_tokens, stream=True)
                return plain.text, streamed.text

            first = await pair()
            for kind, text in zip(("non-streamed", "streamed"), first, strict=True):
                if code not in text:
                    self._find("needle-missing", f"needle:{endpoint}", f"{kind} reply does not repeat {code}: "
                               f"{_clip(text)}")
            await self._consistent("stream-mismatch", f"needle:{endpoint}", pair, first,
                                   "non-streamed and streamed replies")

    def _needle_prompt(self, endpoint: Endpoint, code: str) -> Prompt:
        g = self.golden
        if endpoint == "completions":
            return g.needle.completions.format(filler=g.filler, code=code)
        return g.needle.chat_messages(filler=g.filler, code=code, example1=g.code(self.rng),
                                      example2=g.code(self.rng))

    async def endpoint_consistency(self) -> None:
        g = self.golden
        if self.plan.reasoning_effort:
            self.result.skipped["endpoint-consistency"] = (
                f"chat requests carry reasoning_effort={self.plan.reasoning_effort}, which /tokenize does not render")
            return
        prompt = self._needle_prompt("chat", g.code(self.rng))
        assert isinstance(prompt, list)
        ids = await self.client.tokenize_chat(self.model, prompt)
        if ids is None:
            self.result.skipped["endpoint-consistency"] = "the serve has no /tokenize (not vLLM?)"
            return
        self.result.checks.append("endpoint-consistency")

        async def pair() -> tuple[str, str]:
            chat = await self._ask("chat", prompt, g.needle.max_tokens)
            raw = await self._ask("completions", ids, g.needle.max_tokens)
            return chat.text, raw.text

        await self._consistent("endpoint-mismatch", "endpoint-consistency", pair, await pair(),
                               "chat and completions (same tokens) replies")

    async def long_decode(self) -> None:
        n = self.plan.long_decode_tokens
        completions = await self._ask("completions", self.golden.long_decode.completions, n)
        chat = await self._ask("chat", self.golden.long_decode.chat, n, stream=True)
        self.result.greedy["long:completions"], self.result.greedy["long:chat"] = completions.text, chat.text
        self._degeneration("long-decode:completions", completions.text)
        self._degeneration("long-decode:chat", chat.text)

    async def shared_prefix(self) -> None:
        g = self.golden
        codes = [g.code(self.rng) for _ in range(self.plan.concurrency)]
        prompts = [g.shared_prefix.template.format(filler=g.filler, index=i + 1, code=c) for i, c in enumerate(codes)]
        await self._ask("completions", prompts[0], g.shared_prefix.max_tokens)  # fills the prefix cache
        replies = await asyncio.gather(*(self._ask("completions", p, g.shared_prefix.max_tokens) for p in prompts))
        for i, (code, reply) in enumerate(zip(codes, replies, strict=True)):
            check = f"shared-prefix[{i + 1}/{len(codes)}]"
            others = [c for c in codes if c != code and c in reply.text]
            if others:
                self._find("crosstalk", check, f"reply carries another request's code {others[0]}: {_clip(reply.text)}")
            elif code not in reply.text:
                self._find("needle-missing", check, f"reply does not repeat {code}: {_clip(reply.text)}")
            self._degeneration(check, reply.text)

    async def known_answers(self, record: bool) -> None:
        cal = self.calibration
        for ka in self.golden.known_answers:
            if not record and cal and ka.id not in cal.known_answers_right and f"ka:{ka.id}" not in cal.greedy:
                continue
            reply = await self._ask(ka.endpoint, ka.prompt, ka.max_tokens)
            self.result.greedy[f"ka:{ka.id}"] = reply.text
            if ka.right(reply.text):
                self.result.known_right.append(ka.id)
            elif cal and ka.id in cal.known_answers_right:
                self._find("known-answer-wrong", f"known-answers:{ka.id}",
                           f"{ka.prompt!r} no longer matches /{ka.accept}/ (right on the calibrated serve): "
                           f"{_clip(reply.text)}")

    def golden_compare(self) -> None:
        assert self.calibration is not None
        for probe, recorded in self.calibration.greedy.items():
            now = self.result.greedy.get(probe)
            if now is None:
                continue
            now = redact(now)  # a calibration is stored masked (calibration.py): compare like with like
            if not agree(now, recorded, self.t.golden_min_prefix_chars):
                at = agreeing_prefix(now, recorded)
                self._find("golden-divergence", f"golden:{probe}",
                           f"greedy reply leaves the calibrated one at char {at}: now {_clip(now[at:], 60)}, "
                           f"recorded {_clip(recorded[at:], 60)}")

    async def run(self, *, record: bool = False) -> RoundResult:
        began = time.monotonic()
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("needle", self.needle), ("endpoint-consistency", self.endpoint_consistency),
            ("long-decode", self.long_decode), ("shared-prefix", self.shared_prefix)]
        for i, (name, step) in enumerate(steps):
            if i and self.pause:
                self.result.paused_s += await self.pause()
            if name != "endpoint-consistency":
                self.result.checks.append(name)
            await step()
        if self.calibration or record:
            if self.pause:
                self.result.paused_s += await self.pause()
            await self.known_answers(record)
        if self.calibration:
            self.result.checks.append("known-answers")
            self.golden_compare()
            self.result.checks.append("golden")
        else:
            for name in CALIBRATED:
                self.result.skipped[name] = ("recording this model's calibration now" if record else
                                             "no calibration for this model (record one with --record-calibration)")
        self.result.seconds = time.monotonic() - began
        return self.result


async def run_round(client: CanaryClient, model: str, golden: Golden, plan: RoundPlan,
                    calibration: Calibration | None, *, record: bool = False,
                    rng: random.Random | None = None, pause: Pause | None = None) -> RoundResult:
    return await Round(client, model, golden, plan, calibration, rng or random.Random(), pause).run(record=record)
