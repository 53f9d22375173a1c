"""Job state from done reports: one state machine per job, a pure bookkeeper, no I/O.

Each job is in exactly one state:

    pending   nothing final known: queued, being run, or back on the queue after a retry
              (the controller cannot see a worker pick a job up, only its reports)
    running   a worker reported a result; it is being fetched and verified
    finished  a verified result (success or sample_error), or a final failure ("failed")
    dead      dead-lettered without a result

    pending  --success/sample_error/duplicate report-->  running
    running  --result verified-->                        finished
    running  --result unreadable-->                      pending   (the job is run again)
    pending  --failed report-->                          finished  (failed)
    pending  --dead letter-->                            dead
    dead     --success report-->                         running   (a late success wins)
    finished(failed) --success report-->                 running   (a result beats a failure)

Delivery is at least once: a report may arrive twice, a job may be redelivered (even while
it runs) and a copy may land in the dead-letter queue after the job succeeded. Anything
that would move a job backwards is counted as a duplicate and ignored, so a job never
counts twice and the run ends only when every job is finished or dead.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ...protocol import DoneMessage

JobState = Literal["pending", "running", "finished", "dead"]
RESULT_OUTCOMES = ("success", "sample_error", "skipped_duplicate")


@dataclass
class JobTracker:
    job_ids: frozenset[str]
    state: dict[str, JobState] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)  # finished jobs: success, sample_error or failed
    dead_errors: dict[str, tuple[str, str]] = field(default_factory=dict)  # dead jobs: (error class, error)
    last_error: dict[str, tuple[str, str]] = field(default_factory=dict)
    reported_sample_error: set[str] = field(default_factory=set)
    fetching: set[str] = field(default_factory=set)  # the running jobs: result being fetched
    late_successes: set[str] = field(default_factory=set)  # finished after they were dead-lettered
    retrying: set[str] = field(default_factory=set)  # pending jobs reported for a retry: they come back
    job_seconds: array[float] = field(default_factory=lambda: array("d"))  # 8 bytes a result
    attempts: int = 0
    redeliveries: int = 0
    duplicates: int = 0
    # Finished jobs whose outcome is "failed" (no result), in the order they failed.
    failed_jobs: dict[str, None] = field(default_factory=dict)
    # Kept as jobs move, so that the loop's questions (how many remain, is it complete, how
    # many failed) cost the same at 100,000 jobs as at 10: the loop asks them on every receive.
    _counts: Counter[JobState] = field(default_factory=Counter, repr=False)
    _unsuccessful: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self._counts = Counter(self.state.values())
        self._unsuccessful = sum(1 for o in self.outcome.values() if o != "success")
        self.failed_jobs = {job_id: None for job_id, o in self.outcome.items() if o == "failed"}

    @classmethod
    def of(cls, job_ids: Iterable[str]) -> "JobTracker":
        # Interned, as each report's job id is: the tracker's and the collector's tables then
        # share one string per job, not one more per report.
        ids = frozenset(sys.intern(job_id) for job_id in job_ids)
        return cls(ids, state=dict.fromkeys(ids, "pending"))

    def _move(self, job_id: str, to: JobState) -> None:
        before = self.state.get(job_id)
        if before is not None:
            self._counts[before] -= 1
        self._counts[to] += 1
        self.state[job_id] = to
        if to != "finished":
            self._drop_outcome(job_id)
        if to != "dead":
            self.dead_errors.pop(job_id, None)
        if to != "running":
            self.fetching.discard(job_id)
        self.retrying.discard(job_id)

    def _set_outcome(self, job_id: str, outcome: str) -> None:
        self._drop_outcome(job_id)
        self.outcome[job_id] = outcome
        self._unsuccessful += outcome != "success"
        if outcome == "failed":
            self.failed_jobs[job_id] = None

    def _drop_outcome(self, job_id: str) -> None:
        old = self.outcome.pop(job_id, None)
        if old is not None:
            self._unsuccessful -= old != "success"
            self.failed_jobs.pop(job_id, None)

    # -- inputs ------------------------------------------------------------------------
    def resumed(self, job_ids: Iterable[str]) -> None:
        """Jobs whose finished result an earlier run of the fleet left."""
        for job_id in job_ids:
            if job_id in self.job_ids:
                self._move(job_id, "finished")
                self._set_outcome(job_id, "success")

    def on_report(self, msg: DoneMessage) -> str | None:
        """Account for one done report; returns the job id whose result to fetch, if any."""
        job_id = sys.intern(msg.job_id or "")
        if msg.type != "done" or job_id not in self.job_ids:
            return None
        self.attempts += 1
        if msg.receive_count > 1:
            self.redeliveries += 1
        now = self.state[job_id]
        if msg.outcome in ("retry", "failed"):
            if now != "pending":
                self.duplicates += now == "finished" and msg.outcome == "failed"
                return None  # a result (or a final state) already outranks this attempt
            self.last_error[job_id] = (msg.error_class or "infra", msg.error or "")
            if msg.outcome == "retry":
                self.retrying.add(job_id)
            if msg.outcome == "failed":
                self._move(job_id, "finished")
                self._set_outcome(job_id, "failed")
            return None
        if msg.outcome not in RESULT_OUTCOMES:
            return None
        if now == "running" or (now == "finished" and self.outcome[job_id] != "failed"):
            self.duplicates += 1
            return None
        if msg.started_at and msg.finished_at and msg.outcome != "skipped_duplicate":
            self.job_seconds.append(msg.finished_at - msg.started_at)
        if msg.outcome == "sample_error":
            self.last_error[job_id] = (msg.error_class or "task_error", msg.error or "")
            self.reported_sample_error.add(job_id)
        if now == "dead":
            self.late_successes.add(job_id)
        self._move(job_id, "running")
        self.fetching.add(job_id)
        return job_id

    def fetched(self, job_id: str, ok: bool) -> None:
        """A result fetch finished; a bad result sends the job back to pending (it is run again)."""
        if self.state.get(job_id) != "running":
            return
        if not ok:
            self.late_successes.discard(job_id)
            self._move(job_id, "pending")
            self.retrying.add(job_id)  # sent again
            return
        self._move(job_id, "finished")
        self._set_outcome(job_id, "sample_error" if job_id in self.reported_sample_error else "success")

    def unverified(self, job_id: str) -> None:
        """A finished job's result turned out unreadable (checked again before the merge)."""
        if self.state.get(job_id) == "finished" and self.outcome.get(job_id) != "failed":
            self._move(job_id, "pending")
            self.retrying.add(job_id)  # sent again

    def abandon(self, job_id: str, error_class: str, error: str) -> None:
        """Give up on a pending job (its result keeps arriving unreadable): dead, with why."""
        if self.state.get(job_id) == "pending":
            self._move(job_id, "dead")
            self.dead_errors[job_id] = (error_class, error)

    def dead_lettered(self, job_id: str) -> None:
        if job_id not in self.job_ids:
            return
        if self.state[job_id] != "pending":
            self.duplicates += self.state[job_id] != "dead"
            return  # a copy of a job that has (or is getting) a result: the result wins
        self._move(job_id, "dead")
        self.dead_errors[job_id] = self.last_error.get(job_id, ("infra", "no error reported"))

    # -- queries -----------------------------------------------------------------------
    def in_state(self, state: JobState) -> set[str]:
        return {job_id for job_id, s in self.state.items() if s == state}

    @property
    def final(self) -> dict[str, str]:
        """Finished jobs and their outcome (success, sample_error, failed)."""
        return dict(self.outcome)

    @property
    def dead(self) -> dict[str, tuple[str, str]]:
        return dict(self.dead_errors)

    @property
    def finished(self) -> int:
        """Jobs that reached an end: finished or dead."""
        return len(self.outcome) + len(self.dead_errors)

    @property
    def complete(self) -> bool:
        return not (self._counts["pending"] or self._counts["running"])

    @property
    def remaining(self) -> int:
        """Jobs workers still have to do: pending ones (running ones only need fetching)."""
        return self._counts["pending"]

    @property
    def failed(self) -> int:
        """Finished jobs without a success: sample errors and failures."""
        return self._unsuccessful

    def check(self) -> None:
        """The invariants; raises AssertionError when the bookkeeping is inconsistent."""
        assert set(self.state) == self.job_ids, "every job has a state"
        assert set(self.outcome) == self.in_state("finished"), "outcomes are those of finished jobs"
        assert set(self.dead_errors) == self.in_state("dead"), "errors are those of dead jobs"
        assert self.fetching == self.in_state("running"), "running jobs are the ones being fetched"
        assert self.late_successes <= self.in_state("running") | self.in_state("finished")
        assert self._counts == Counter(self.state.values()), "the counts per state are the states'"
        assert self.failed == sum(1 for o in self.outcome.values() if o != "success"), "failed counts the outcomes"
        assert list(self.failed_jobs) == [j for j, o in self.outcome.items() if o == "failed"], "failed jobs in order"
