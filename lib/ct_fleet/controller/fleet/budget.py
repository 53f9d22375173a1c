"""The fleet-wide model budget on the controller: each model's total, its division among the
live workers, and (with --adaptive-connections) the total's response to rate limits.

The format and the worker's side are in protocol/budget.py. The division is even among the
live workers, each share capped at the worker's slots (a worker cannot use more). When the
division changes, a share that shrinks shrinks at once, and one that grows grows only into
what the others are known not to hold: a worker told to shrink may still run the jobs it
started under its old share until its heartbeat says otherwise. So a joining worker (or a
lowered adaptive total) never takes the fleet past its total; a dead worker's share is
free at once (its jobs died with it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...connections import ConnectionBudget, budget_keys, connection_budget
from ...protocol import DoneMessage
from ...protocol.budget import BUDGET_REPORT, RATE_LIMITED, Budget, ModelBudget
from ...services import budget as budget_store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Cooldowns before a refused total is tried again (then twice as many, and so on).
PROBE_COOLDOWNS = 4


def even_split(total: int, workers: Sequence[str], slots: int) -> dict[str, int]:
    """`total` divided among `workers` (in their order), the remainder to the first ones,
    each share at most `slots`."""
    if not workers:
        return {}
    base, extra = divmod(total, len(workers))
    return {w: min(slots, base + (1 if i < extra else 0)) for i, w in enumerate(workers)}


def divide(
    total: int, workers: Sequence[str], slots: int, granted: Mapping[str, int], held: Mapping[str, int]
) -> dict[str, int]:
    """The shares to grant now. `granted`: the shares in force; `held`: what each worker may
    still hold (its last report, or its share before a cut it has not confirmed)."""
    target = even_split(total, workers, slots)
    new: dict[str, int] = {}
    reserved = 0
    growing = []
    for w in workers:
        before = granted.get(w, 0)
        if target[w] <= before:
            new[w] = target[w]
            reserved += max(target[w], held.get(w, 0))
        else:
            new[w] = before
            reserved += max(before, held.get(w, 0))
            growing.append(w)
    room = max(0, total - reserved)
    for w in growing:
        add = min(target[w] - new[w], room)
        new[w] += add
        room -= add
    return new


@dataclass
class ModelState:
    bounds: ConnectionBudget
    total: int
    granted: dict[str, int] = field(default_factory=dict)
    # the most each worker may hold: its share before a cut, until a report after the cut
    ceiling: dict[str, int] = field(default_factory=dict)
    cut_at: dict[str, int] = field(default_factory=dict)  # version of each worker's last cut
    rate_limited: int = 0  # retries reported since the last update
    pressured: bool = False  # the last update saw some
    last_cut: float = -math.inf
    last_move: float = -math.inf
    refused_at: int | None = None  # the total of the last cut: the provider refused it
    probe_after: float = -math.inf  # growing back to refused_at waits until then
    probe_wait: float = 0.0  # doubles with every cut


class FleetBudget:
    """Owns the totals and the division; `update` gives the document to write when it changed."""

    def __init__(
        self,
        bounds: Mapping[str, ConnectionBudget],
        slots: int,
        clock: Callable[[], float] = time.monotonic,
        first_version: int = 0,
        pools: Mapping[str, str] | None = None,
    ) -> None:
        self.models = {m: ModelState(b, b.start) for m, b in bounds.items()}  # by budget key
        self.pools = dict(pools or {})  # model -> the provider budget it shares (shared_budget)
        self.slots = slots
        self.clock = clock
        # Versions go on from an earlier controller's (a time): a worker's report of what it
        # read then never passes for one of this controller's cuts.
        self.version = first_version
        self._written = False
        # Every model of the fleet has a budget: workers beyond what holds it add nothing.
        self.covers_all = bool(bounds)
        self.held: dict[str, tuple[int, dict[str, int]]] = {}  # worker -> (version read, requests per model)
        self.waiting: dict[str, dict[str, int]] = {}  # worker -> requests waiting for a token, per model
        self.limited_seen: dict[str, dict[str, int]] = {}  # worker -> its rate-limit retries so far, per model
        self.rate_limited_total = 0

    @classmethod
    def of_options(
        cls, options: Mapping[str, Any], models: Sequence[str], slots: int, shared: str | None = None
    ) -> "FleetBudget":
        """--max-connections / --adaptive-connections: each model's requests across the fleet
        (the models of a `shared` provider: theirs together)."""
        wanted = connection_budget(options)
        if wanted is None:
            return cls({}, slots, first_version=int(time.time()))
        keys = budget_keys(models, shared)
        pools = {m: k for m, k in keys.items() if m != k}
        return cls(dict.fromkeys(keys.values(), wanted), slots, first_version=int(time.time()), pools=pools)

    def publish(self, s3: S3Client, bucket: str, fleet_id: str, live: Sequence[str], record: Path) -> None:
        """The division among the live workers, written when it changed (and recorded, one
        line each, in `record`); with no budget, one left by an earlier run of the fleet is
        removed (before the first launch)."""
        if not self.models:
            if not live:
                budget_store.delete(s3, bucket, fleet_id)
            return
        doc = self.update(live)
        if doc is not None:
            budget_store.put(s3, bucket, fleet_id, doc)
            with open(record, "a") as fh:
                fh.write(json.dumps({"at": time.time(), **doc.model_dump()}) + "\n")

    def __bool__(self) -> bool:
        return bool(self.models)

    @property
    def capacity(self) -> int:
        """Model requests the fleet may ever have in flight at once (the highest totals)."""
        return sum(s.bounds.high for s in self.models.values())

    def document(self) -> Budget:
        return Budget(
            v=self.version,
            models={
                m: ModelBudget(total=s.total, shares=dict(s.granted), adaptive=s.bounds.low != s.bounds.high)
                for m, s in self.models.items()
            },
            pools=dict(self.pools),
        )

    # -- what workers say -----------------------------------------------------------------
    def on_word(self, msg: DoneMessage) -> None:
        report = msg.extra.get(BUDGET_REPORT)
        if isinstance(report, dict) and isinstance(report.get("v"), int) and isinstance(report.get("held"), dict):
            held = {str(m): int(n) for m, n in report["held"].items() if isinstance(n, int)}
            self.held[msg.instance_id] = (report["v"], held)
            waiting = report.get("waiting")
            if isinstance(waiting, dict):
                self.waiting[msg.instance_id] = {str(m): n for m, n in waiting.items() if isinstance(n, int)}
            counts = report.get("limited")
            if isinstance(counts, dict):
                seen = self.limited_seen.setdefault(msg.instance_id, {})
                for name, count in counts.items():
                    if name in self.models and isinstance(count, int) and count > seen.get(name, 0):
                        self.models[name].rate_limited += count - seen.get(name, 0)
                        self.rate_limited_total += count - seen.get(name, 0)
                        seen[name] = count
        limited = msg.extra.get(RATE_LIMITED)
        if isinstance(limited, int) and limited > 0 and msg.type == "done":
            self.rate_limited_total += limited
            job_model = msg.extra.get("model")
            job_model = self.pools.get(job_model, job_model) if isinstance(job_model, str) else None
            for name, state in self.models.items():
                if job_model in (None, name):
                    state.rate_limited += limited

    # -- the division -----------------------------------------------------------------------
    def update(self, live: Sequence[str]) -> Budget | None:
        """Redivide among `live` (adapting the totals first); the new document, or None."""
        workers = sorted(live)
        changed = False
        for name, state in self.models.items():
            state.pressured, state.rate_limited = state.rate_limited > 0, 0
            self._adapt(state, any(self.waiting.get(w, {}).get(name, 0) for w in workers))
            holds = {w: self._may_hold(name, state, w) for w in workers}
            new = divide(state.total, workers, self.slots, state.granted, holds)
            if new != state.granted:
                changed = True
                for w, share in new.items():
                    if share < state.granted.get(w, 0):
                        state.ceiling[w] = max(state.ceiling.get(w, 0), state.granted[w])
                        state.cut_at[w] = self.version + 1
                state.granted = new
        if changed or not self._written:
            self.version += 1
            self._written = True
            return self.document()
        return None

    def _may_hold(self, name: str, state: ModelState, worker: str) -> int:
        seen_v, held = self.held.get(worker, (-1, {}))
        if seen_v >= state.cut_at.get(worker, 0):
            # The worker read its last cut: it holds what it said (its jobs of before the cut
            # included), and may take up to its share.
            state.ceiling.pop(worker, None)
            return held.get(name, 0)
        return max(state.ceiling.get(worker, 0), state.granted.get(worker, 0))

    def _adapt(self, state: ModelState, demand: bool) -> None:
        """AIMD on the total, as Inspect's adaptive connections do in one process: cut by
        `decrease` on rate-limit retries (at most once per cooldown), grow by `scale_up`
        once per cooldown without any, while the workers are granted all of it and requests
        wait for its tokens. The fleet learns of a 429 seconds after it (each worker cuts
        its own share at once meanwhile), so every probe past the provider's limit costs
        refusals: once a total has been refused, the total grows back to just under it,
        and tries it again only after PROBE_COOLDOWNS cooldowns, twice as long each time."""
        b = state.bounds
        if b.low == b.high:
            return
        now = self.clock()
        if state.pressured:
            if now - state.last_cut >= b.cooldown:
                state.refused_at = state.total
                state.probe_wait = 2 * state.probe_wait or PROBE_COOLDOWNS * b.cooldown
                state.probe_after = now + state.probe_wait
                state.total = max(b.low, int(state.total * b.decrease))
                state.last_cut = state.last_move = now
        elif now - state.last_move >= b.cooldown and demand and sum(state.granted.values()) >= state.total:
            grown = min(b.high, state.total + max(1, round(state.total * b.scale_up)))
            if state.refused_at is not None and now < state.probe_after:
                grown = min(grown, max(state.total, state.refused_at - 1))
            if grown != state.total:
                state.total = grown
                state.last_move = now

    # -- for scaling and the live line ------------------------------------------------------
    def saturated(self, live: Sequence[str] = ()) -> bool:
        """True when every budgeted model's total is granted and requests wait for its
        tokens (a worker's last report): another worker would only wait too."""
        return bool(self.models) and all(
            sum(s.granted.values()) >= s.total and any(self.waiting.get(w, {}).get(m, 0) for w in live)
            for m, s in self.models.items()
        )

    def pressure(self) -> bool:
        """Rate-limit retries in the last interval between updates."""
        return any(s.pressured for s in self.models.values())

    def workers_needed(self) -> int:
        """Workers whose slots hold twice every model's highest total: a job spends part of
        its time off the model (its start, its tools, its scoring), and the budget's
        requests are kept busy while it does."""
        return max(1, math.ceil(2 * self.capacity / max(1, self.slots)))
