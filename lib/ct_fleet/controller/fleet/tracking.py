"""Tracking a fleet: done reports taken until every job is finished or dead, with a look at
EC2 and the queues every check_interval (reaping, cost, dead letters, replacements, scaling)
and the reasons to stop early (no progress, no word from workers, a lost lease, max_cost).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from ...protocol import START_CONCURRENCY
from ...services import queues, stop
from ..reporting import progress_of
from . import liveness, phases
from .ordering import record_history

if TYPE_CHECKING:
    from .run import FleetRun

DONE_POLL_PAUSE = 1.0


def pause_after(received: int, remaining: int) -> float:
    """Seconds to wait before the next receive. A part-full batch means the queue is
    drained: reports pile up a little meanwhile, so that receives and deletes stay batched
    (calls per second, not per job). Not once one batch would hold every report still to
    come: each could be the run's last, and it would wait out the pause for nothing."""
    return DONE_POLL_PAUSE if received < queues.BATCH and remaining > queues.BATCH else 0.0


def track(run: FleetRun, start: float) -> str | None:
    """Take done reports until every job is finished or dead (None), or a reason to stop."""
    last_progress = last_activity = time.monotonic()
    last_check = -math.inf  # the first pass looks at the fleet at once (monotonic time starts near 0 at boot)
    live = list(run.pool.launched)
    warned_stale = False
    tail = Tail()
    phases.reached(phases.TRACKING, run.run_dir)
    while not (run.state.complete and run.results.intact()):
        if run.state.remaining == 0 and run.results.in_flight:
            # Every job is reported: only its result is still coming (the end of the run).
            run.results.collect(wait=True)
            _report(run, start, live)
            continue
        try:
            messages = queues.receive(run.sqs, run.queues.done, wait=1 if run.results.in_flight else 5)
        except ClientError as exc:
            if liveness.gone(exc) is None:
                raise
            gone = liveness.missing(run.sqs, run.s3, run.queues, run.cfg.bucket, run.spec.fleet_id)
            return f"{gone or liveness.gone(exc)}: the fleet cannot progress; fleet terminated"
        before = run.state.finished
        run.results.take(messages)
        if messages:
            queues.delete_batch(run.sqs, run.queues.done, [m["ReceiptHandle"] for m in messages])
            last_activity = time.monotonic()
        time.sleep(pause_after(len(messages), run.state.remaining))
        run.results.collect()
        if run.state.finished > before:
            last_progress = time.monotonic()
            warned_stale = False
        now = time.monotonic()
        if now - last_check >= (run.cfg.check_interval or 5):
            last_check = now
            live, why = _check_fleet(run)
            if why:
                return why
            tail.look(run)
        _report(run, start, live)
        quiet = now - last_progress
        if quiet >= run.cfg.stale_after and not warned_stale:
            run.warn(f"no progress for {quiet / 60:.0f} min ({len(live)} workers up); still waiting")
            warned_stale = True
        silent_limit = max(run.cfg.silent_timeout, 1.5 * run.cfg.sample_time_limit)
        if not live and run.pool.limited and quiet >= min(silent_limit, run.cfg.no_sample_timeout):
            return f"no worker could be launched for {quiet:.0f}s ({run.pool.limited}): fleet stopped"
        if quiet >= silent_limit and now - last_activity >= silent_limit:
            return f"no progress and no word from workers for {quiet:.0f}s: fleet terminated"
        if quiet >= run.cfg.no_sample_timeout:
            return f"no completed sample for {quiet:.0f}s while workers were active: fleet terminated"
    run.results.collect(wait=True)
    record_history(run)
    return None


class Tail:
    """The queue's tail (protocol/stop.py): nothing queued, no retry to come, jobs still
    running. Said to the workers once (a marker), unsaid if work comes back."""

    def __init__(self) -> None:
        self.said = False

    def look(self, run: FleetRun) -> None:
        reached = bool(
            run.state.remaining and "work" in run.depths and not run.depths["work"] and not run.state.retrying
        )
        if reached != self.said:
            stop.mark_tail(run.s3, run.cfg.bucket, run.spec.fleet_id, reached)
            self.said = reached


def _check_fleet(run: FleetRun) -> tuple[list[str], str | None]:
    """One look at EC2 and the queues: reap, cost, dead letters, replacements, scaling."""
    gone = liveness.cloud_gone(run.cloud)
    if gone:
        return run.pool.launched, gone
    if run.lease.lost:
        return run.pool.launched, f"another controller took over fleet {run.spec.fleet_id}: this one stops"
    gone = liveness.missing(run.sqs, run.s3, run.queues, run.cfg.bucket, run.spec.fleet_id)
    if gone:
        return run.pool.launched, f"{gone}: the fleet cannot progress; fleet terminated"
    live, ended = run.pool.look()
    pending = run.state.in_state("pending") if ended else set()
    for lost in run.pool.lost.release(run.sqs, run.queues.work, ended, pending.__contains__):
        run.results.on_report(lost)
    run.pool.publish_budget(live)
    if ended and run.state.remaining:
        why = run.pool.deterministic_boot_failure(ended)
        if why:
            return live, why
    ec2, model = run.pool.cost_so_far(), run.results.usage.cost
    if run.cfg.max_cost is not None and ec2 + model >= run.cfg.max_cost:
        return live, (
            f"cost so far ${ec2 + model:.2f} (EC2 ${ec2:.2f}, model ${model:.2f}) "
            f"reached max_cost ${run.cfg.max_cost:.2f}: fleet terminated"
        )
    run.depths = queues.depths(run.sqs, run.queues, roles=("work", "dlq"))
    if run.depths.get("dlq") or run.depths.get("dlq_in_flight"):
        run.results.drain_dlq(run.queues.dlq)
    return live, run.pool.manage(live, remaining=run.state.remaining, waiting=run.depths.get("work", 0))


def _report(run: FleetRun, start: float, live: list[str]) -> None:
    run.on_progress(
        progress_of(
            run.state,
            total=len(run.jobs),
            depths=run.depths,
            workers=len(live),
            slots=len(live) * (run.cfg.concurrency_per_worker or START_CONCURRENCY),
            elapsed=time.monotonic() - start,
            cost=run.pool.cost_so_far() if run.spec.hourly_price else None,
            tokens=run.results.usage.tokens,
            model_cost=run.results.usage.cost,
            wanted=len(live) + run.pool.short,
            fewer_why=run.pool.limited or "",
            limit=run.pool.limits.now,
        )
    )
