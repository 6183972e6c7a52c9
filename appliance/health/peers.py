"""Facts that must be the same on every rank of a multi-node serve (K15), compared across ranks.

Which facts: the log-check table marks them (`same_on_every_rank:`), e.g. `vLLM is using nccl==X`.
Two readers use the one comparison here:
- `appliance logscan` on the ranks' logs after the fact;
- the head's exporter while serving: it asks the workers' exporters (their addresses come from the
  rendezvous) for their facts. The rendezvous compared the *installed* NCCL before launch; this
  catches what the engine really loaded (an `LD_LIBRARY_PATH` or a base image's system NCCL can win
  over the wheel). A disagreement keeps the head from ready: NCCL collectives between different
  versions hang instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance.bounds import show
from appliance.errors import ApplianceError
from appliance.health.expect import ExpectationStatus, show_value
from appliance.health.table import LogTable
from appliance.jsonstrict import JsonObject
from appliance.profile.model import DEFAULT_HEALTH_PORT, Profile
from appliance.profile.topology import rank_view

if TYPE_CHECKING:
    import httpx

MAX_STATUS_BYTES = 4 << 20
"""An exporter's /status is a few KiB."""
FIX = "run the same image, versions.json and profile on every node (`appliance versions --check` on each)"


def compared_facts(table: LogTable) -> dict[str, str]:
    """fact name -> the rule that wants it equal on every rank."""
    return {name: p.same_on_every_rank for p in table.facts if p.same_on_every_rank for name in p.produces()}


def ranks_printing(table: LogTable, profile: Profile, ranks: Iterable[int]) -> dict[int, set[str]]:
    """node rank -> the facts its log can carry (printed_by): a rank that never prints a line is not asked for it."""
    return {rank: table.printed_on(rank_view(profile, rank)) for rank in ranks}


@dataclass(frozen=True)
class Agreement:
    rule: str
    fact: str
    status: ExpectationStatus
    message: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "fact": self.fact, "status": self.status, "message": self.message}


def agreement(rule: str, fact: str, per_rank: Mapping[str, Any]) -> Agreement:
    """Compare one fact across ranks (label -> value; None = not seen there).

    A rank that has not said is `unknown`, never a silent pass: it may not have reached that point, or
    its exporter did not answer. Any two different values anywhere are `fail`.
    """
    seen = {label: v for label, v in per_rank.items() if v is not None and v != []}
    unseen = [label for label in per_rank if label not in seen]
    values = {show_value(one) for v in seen.values() for one in (v if isinstance(v, list) else [v])}
    listing = ", ".join(f"{label} {show_value(v)}" for label, v in seen.items())
    if len(values) > 1:
        return Agreement(rule, fact, "fail", f"{rule} {fact} differs between ranks ({listing}); fix: {FIX}")
    if not seen:
        return Agreement(rule, fact, "unknown", f"{rule} no rank reported {fact}")
    if unseen:
        return Agreement(rule, fact, "unknown", f"{rule} {fact} not reported by {', '.join(unseen)} ({listing})")
    return Agreement(rule, fact, "pass", f"{rule} {fact} is {values.pop()} on every rank")


def agreements(compared: Mapping[str, str], per_rank: Mapping[str, Mapping[str, Any]],
               printed: Mapping[str, set[str]] | None = None) -> list[Agreement]:
    """Every compared fact across the ranks that print it (label -> that rank's facts; ``printed``: label -> the
    facts its log can carry, default every one). A fact fewer than two ranks print has nothing to agree with:
    `vLLM is using nccl==` comes from a group's rank 0 only, so on two GB10s NCCL's own banner, which every rank
    prints, carries the comparison."""
    out = []
    for fact, rule in compared.items():
        ranks = {label: facts.get(fact) for label, facts in per_rank.items()
                 if printed is None or fact in printed.get(label, set())}
        if len(ranks) >= 2 or printed is None:
            out.append(agreement(rule, fact, ranks))
    return out


@dataclass(frozen=True)
class PeerView:
    """What one worker's exporter last said (or why it did not)."""

    rank: int
    url: str
    state: str | None = None
    facts: Mapping[str, Any] | None = None
    error: str | None = None
    asked_at: float | None = None
    channel: str | None = None
    """The engine channel and its lock digest the worker's exporter judges (U5: one channel for every rank)."""
    lock_digest: str | None = None

    def to_json(self, now: float, compared: Iterable[str]) -> JsonObject:
        said = {name: self.facts.get(name) for name in compared} if self.facts is not None else None
        return {"rank": self.rank, "url": self.url, "state": self.state, "facts": said, "error": self.error,
                "channel": self.channel, "lock_digest": self.lock_digest,
                "age_s": None if self.asked_at is None else round(now - self.asked_at, 1)}


@dataclass(frozen=True)
class CrossRank:
    agreements: tuple[Agreement, ...]
    peers: tuple[PeerView, ...]

    @property
    def reasons(self) -> list[str]:
        """What keeps the head from ready: only a proven disagreement, never a peer that is slow to say."""
        return [a.message for a in self.agreements if a.status == "fail"]

    def to_json(self, now: float) -> JsonObject:
        return {"agreements": [a.to_json() for a in self.agreements],
                "peers": [p.to_json(now, [a.fact for a in self.agreements]) for p in self.peers]}


def parse_peer(text: str) -> tuple[int, str]:
    """`RANK=URL` (the exporter's --peer) -> (rank, base URL)."""
    rank, sep, url = text.partition("=")
    if not sep or not rank.strip().isdigit() or int(rank) < 1 or not url.startswith(("http://", "https://")):
        raise ApplianceError(f"cannot read --peer {show(text)}", field="--peer", value=text,
                             fix=f"write RANK=URL with a worker rank >= 1, e.g. --peer 1=http://10.0.0.2:{DEFAULT_HEALTH_PORT}",
                             reason="the head compares what each rank loaded with the workers' exporters (K15)")
    return int(rank), url.rstrip("/")


class PeerWatch:
    """Asks the workers' exporters for /status at most every `every` seconds, all at once; in between, the
    verdict comes from the last answers. So slow or dead peers, however many, cost the head's poll loop at most
    one request timeout, and its /live never goes stale because a worker host is down."""

    def __init__(self, peers: Mapping[int, str], compared: Mapping[str, str], *, clock: Callable[[], float],
                 every: float = 10.0, timeout: float = 1.5, client: httpx.Client | None = None,
                 printed: Mapping[int, set[str]] | None = None) -> None:
        self.clock = clock
        self.every = every
        self.compared = dict(compared)
        self.printed = {f"rank {rank}": facts for rank, facts in printed.items()} if printed is not None else None
        self._views = {rank: PeerView(rank, url) for rank, url in sorted(peers.items())}
        import httpx  # here, not at the top: `appliance logscan` compares ranks without HTTP

        self._client = client or httpx.Client(timeout=timeout, trust_env=False)
        self.timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self._views)), thread_name_prefix="peer")
        self._asked_at: float | None = None

    def _ask(self, view: PeerView, now: float) -> PeerView:
        """One /status, whole within the timeout and a size cap (a peer trickling its answer must not stall the
        head's poll loop, which waits for every peer), read as strict JSON of the expected shape."""
        import httpx

        from appliance.http_bounded import ReplyError, get
        from appliance.redact import clip

        try:
            reply = get(self._client, f"{view.url}/status", deadline=self.timeout, max_bytes=MAX_STATUS_BYTES)
            if reply.status != 200:
                raise ReplyError(f"HTTP {reply.status}")
            body = reply.json_object()
            facts = body.get("facts")
            if not isinstance(facts, dict):
                raise ReplyError("`facts` is not an object")
            state = body.get("state") if isinstance(body.get("state"), str) else None
        except (httpx.HTTPError, ReplyError) as exc:
            # Keep what was last heard: a rank's loaded libraries do not change until its engine restarts.
            return PeerView(view.rank, view.url, None, view.facts, f"{type(exc).__name__}: {clip(str(exc), 300)}", now,
                            view.channel, view.lock_digest)
        channel, lock = body.get("channel"), body.get("lock_digest")
        return PeerView(view.rank, view.url, clip(state, 40) if state else None, facts, None, now,
                        clip(channel, 80) if isinstance(channel, str) else None,
                        clip(lock, 80) if isinstance(lock, str) else None)

    def check(self, own: Mapping[str, Any]) -> CrossRank:
        now = self.clock()
        if self._asked_at is None or now - self._asked_at >= self.every:
            self._asked_at = now
            asked = self._pool.map(lambda view: self._ask(view, now), self._views.values())
            self._views = {view.rank: view for view in asked}
        per_rank: dict[str, Mapping[str, Any]] = {"rank 0": own}
        per_rank |= {f"rank {rank}": view.facts or {} for rank, view in self._views.items()}
        return CrossRank(tuple(agreements(self.compared, per_rank, self.printed)), tuple(self._views.values()))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
