"""Tracking a fleet: done reports taken until every job is finished or dead, with a look at
EC2 and the queues every check_interval (reaping, cost, dead letters, replacements, scaling)
and the reasons to stop early (no progress, no word from workers, a lost lease, max_cost).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from botocore.exceptions import ClientError

from ...protocol import START_CONCURRENCY
from ...services import queues, stop
from ..reporting import Progress, progress_of
from . import liveness, phases
from .collector import ResultCollector
from .context import RunContext
from .lease import S3Lease
from .ordering import record_history
from .pool import WorkerPool
from .tracker import JobTracker

DONE_POLL_PAUSE = 1.0


def pause_after(received: int, remaining: int) -> float:
    """Seconds to wait before the next receive. A part-full batch means the queue is
    drained: reports pile up a little meanwhile, so that receives and deletes stay batched
    (calls per second, not per job). Not once one batch would hold every report still to
    come: each could be the run's last, and it would wait out the pause for nothing."""
    return DONE_POLL_PAUSE if received < queues.BATCH and remaining > queues.BATCH else 0.0


class Tracking:
    """The loop a run spends its life in (FleetRun.tracking): done reports taken, results
    collected, the fleet looked at every check_interval, progress shown, until the work is
    done or there is a reason to stop."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        pool: WorkerPool,
        results: ResultCollector,
        state: JobTracker,
        lease: S3Lease,
        fleet_queues: queues.FleetQueues,
        on_progress: Callable[[Progress], None],
    ) -> None:
        self.ctx, self.cfg, self.spec = ctx, ctx.cfg, ctx.spec
        self.sqs, self.s3 = ctx.client("sqs"), ctx.client("s3")
        self.pool, self.results, self.state, self.lease = pool, results, state, lease
        self.queues = fleet_queues
        self.on_progress = on_progress
        self.depths: dict[str, int] = {}
        self.tail = Tail()

    def track(self, start: float) -> str | None:
        """Take done reports until every job is finished or dead (None), or a reason to stop."""
        last_progress = last_activity = time.monotonic()
        last_check = -math.inf  # the first pass looks at the fleet at once (monotonic time starts near 0 at boot)
        live = list(self.pool.launched)
        warned_stale = False
        phases.reached(phases.TRACKING, self.ctx.run_dir)
        while not (self.state.complete and self.results.intact()):
            if self.state.remaining == 0 and self.results.in_flight:
                # Every job is reported: only its result is still coming (the end of the run).
                self.results.collect(wait=True)
                self._report(start, live)
                continue
            try:
                messages = queues.receive(self.sqs, self.queues.done, wait=1 if self.results.in_flight else 5)
            except ClientError as exc:
                if liveness.gone(exc) is None:
                    raise
                gone = liveness.missing(self.sqs, self.s3, self.queues, self.cfg.bucket, self.spec.fleet_id)
                return f"{gone or liveness.gone(exc)}: the fleet cannot progress; fleet terminated"
            before = self.state.finished
            self.results.take(messages)
            if messages:
                queues.delete_batch(self.sqs, self.queues.done, [m["ReceiptHandle"] for m in messages])
                last_activity = time.monotonic()
            time.sleep(pause_after(len(messages), self.state.remaining))
            self.results.collect()
            if self.state.finished > before:
                last_progress = time.monotonic()
                warned_stale = False
            now = time.monotonic()
            if now - last_check >= (self.cfg.check_interval or 5):
                last_check = now
                live, why = self._check_fleet()
                if why:
                    return why
                self.tail.look(self)
            self._report(start, live)
            quiet = now - last_progress
            if quiet >= self.cfg.stale_after and not warned_stale:
                self.ctx.warn(f"no progress for {quiet / 60:.0f} min ({len(live)} workers up); still waiting")
                warned_stale = True
            silent_limit = max(self.cfg.silent_timeout, 1.5 * self.cfg.sample_time_limit)
            if not live and self.pool.limited and quiet >= min(silent_limit, self.cfg.no_sample_timeout):
                return f"no worker could be launched for {quiet:.0f}s ({self.pool.limited}): fleet stopped"
            if quiet >= silent_limit and now - last_activity >= silent_limit:
                return f"no progress and no word from workers for {quiet:.0f}s: fleet terminated"
            if quiet >= self.cfg.no_sample_timeout:
                return f"no completed sample for {quiet:.0f}s while workers were active: fleet terminated"
        self.results.collect(wait=True)
        record_history(self.ctx)
        return None

    def _check_fleet(self) -> tuple[list[str], str | None]:
        """One look at EC2 and the queues: reap, cost, dead letters, replacements, scaling."""
        gone = liveness.cloud_gone(self.ctx.cloud)
        if gone:
            return self.pool.launched, gone
        if self.lease.lost:
            return self.pool.launched, f"another controller took over fleet {self.spec.fleet_id}: this one stops"
        gone = liveness.missing(self.sqs, self.s3, self.queues, self.cfg.bucket, self.spec.fleet_id)
        if gone:
            return self.pool.launched, f"{gone}: the fleet cannot progress; fleet terminated"
        live, ended = self.pool.look()
        pending = self.state.in_state("pending") if ended else set()
        for lost in self.pool.lost.release(self.sqs, self.queues.work, ended, pending.__contains__):
            self.results.on_report(lost)
        self.pool.publish_budget(live)
        if ended and self.state.remaining:
            why = self.pool.deterministic_boot_failure(ended)
            if why:
                return live, why
        ec2, model = self.pool.cost_so_far(), self.results.usage.cost
        if self.cfg.max_cost is not None and ec2 + model >= self.cfg.max_cost:
            return live, (
                f"cost so far ${ec2 + model:.2f} (EC2 ${ec2:.2f}, model ${model:.2f}) "
                f"reached max_cost ${self.cfg.max_cost:.2f}: fleet terminated"
            )
        self.depths = queues.depths(self.sqs, self.queues, roles=("work", "dlq"))
        if self.depths.get("dlq") or self.depths.get("dlq_in_flight"):
            self.results.drain_dlq(self.queues.dlq)
        return live, self.pool.manage(live, remaining=self.state.remaining, waiting=self.depths.get("work", 0))

    def _report(self, start: float, live: list[str]) -> None:
        self.on_progress(
            progress_of(
                self.state,
                total=len(self.spec.jobs),
                depths=self.depths,
                workers=len(live),
                slots=len(live) * (self.cfg.concurrency_per_worker or START_CONCURRENCY),
                elapsed=time.monotonic() - start,
                cost=self.pool.cost_so_far() if self.spec.hourly_price else None,
                tokens=self.results.usage.tokens,
                model_cost=self.results.usage.cost,
                wanted=len(live) + self.pool.short,
                fewer_why=self.pool.limited or "",
                limit=self.pool.limits.now,
            )
        )


class Tail:
    """The queue's tail (protocol/stop.py): nothing queued, no retry to come, jobs still
    running. Said to the workers once (a marker), unsaid if work comes back."""

    def __init__(self) -> None:
        self.said = False

    def look(self, run: Tracking) -> None:
        reached = bool(
            run.state.remaining and "work" in run.depths and not run.depths["work"] and not run.state.retrying
        )
        if reached != self.said:
            stop.mark_tail(run.s3, run.cfg.bucket, run.spec.fleet_id, reached)
            self.said = reached
