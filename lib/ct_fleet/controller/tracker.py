"""Job state from done reports: a pure bookkeeper, no I/O.

The controller feeds it every report, every fetched result and every dead letter; it
says which results to fetch and when the run is over. Delivery is at least once, so the
same report may arrive twice and a job may be redelivered: duplicates never count twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..protocol import DoneMessage


@dataclass
class JobTracker:
    job_ids: frozenset[str]
    final: dict[str, str] = field(default_factory=dict)  # job id -> outcome
    dead: dict[str, tuple[str, str]] = field(default_factory=dict)  # job id -> (error class, error)
    last_error: dict[str, tuple[str, str]] = field(default_factory=dict)
    fetching: set[str] = field(default_factory=set)  # reported done, result being fetched
    job_seconds: list[float] = field(default_factory=list)
    attempts: int = 0
    redeliveries: int = 0
    duplicates: int = 0

    @classmethod
    def of(cls, job_ids: Iterable[str]) -> "JobTracker":
        return cls(frozenset(job_ids))

    # -- inputs ------------------------------------------------------------------------
    def resumed(self, job_ids: Iterable[str]) -> None:
        """Jobs whose finished result an earlier run of the fleet left."""
        for job_id in job_ids:
            self.final[job_id] = "success"

    def on_report(self, msg: DoneMessage) -> str | None:
        """Account for one done report; returns the job id whose result to fetch, if any."""
        job_id = msg.job_id or ""
        if msg.type != "done" or job_id not in self.job_ids:
            return None
        self.attempts += 1
        if msg.receive_count > 1:
            self.redeliveries += 1
        if msg.outcome in ("retry", "failed"):
            self.last_error[job_id] = (msg.error_class or "infra", msg.error or "")
            if msg.outcome == "failed":
                self.final[job_id] = "failed"
            return None
        if job_id in self.final or job_id in self.fetching:
            self.duplicates += 1
            return None
        if msg.started_at and msg.finished_at and msg.outcome != "skipped_duplicate":
            self.job_seconds.append(msg.finished_at - msg.started_at)
        if msg.outcome == "sample_error":
            self.last_error[job_id] = (msg.error_class or "task_error", msg.error or "")
        self.fetching.add(job_id)
        return job_id

    def fetched(self, job_id: str, ok: bool) -> None:
        """A result fetch finished; a bad result leaves the job to be run again."""
        self.fetching.discard(job_id)
        if ok:
            self.final[job_id] = "sample_error" if job_id in self.last_error else "success"

    def dead_lettered(self, job_id: str) -> None:
        if job_id in self.job_ids and job_id not in self.final:
            self.dead[job_id] = self.last_error.get(job_id, ("infra", "no error reported"))

    # -- queries -----------------------------------------------------------------------
    @property
    def finished(self) -> int:
        return len(self.final) + len(self.dead)

    @property
    def complete(self) -> bool:
        return self.finished >= len(self.job_ids)

    @property
    def remaining(self) -> int:
        """Jobs not yet finished, dead or being fetched: what workers still have to do."""
        return len(self.job_ids) - self.finished - len(self.fetching)

    @property
    def failed(self) -> int:
        return sum(1 for outcome in self.final.values() if outcome != "success")
