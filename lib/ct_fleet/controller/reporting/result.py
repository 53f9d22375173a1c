"""What a run returns, and whether it is a complete, successful one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...error_lines import grouped
from ...protocol import mask

if TYPE_CHECKING:
    from ...merge import MergedTask


@dataclass
class RunResult:
    fleet_id: str
    run_dir: Path
    merged: list[MergedTask]
    jobs: int
    resumed: int
    workers_launched: int
    elapsed: float
    retried_errors: int = 0  # results whose sample errored, run again by this rerun
    attempts: int = 0  # done reports of jobs
    redeliveries: int = 0  # of them, attempts of a job delivered before
    duplicates: int = 0  # reports dropped because the job already had its outcome
    samples_resumed: int = 0  # results whose sample resumed from a checkpoint of a lost attempt
    model_calls_saved: int = 0  # model calls their checkpoints held (not made again)
    sample_seconds_saved: float = 0.0  # the samples' time their checkpoints held (not spent again)
    dropped_messages: int = 0  # done-queue messages that were not reports of this fleet
    stopped_reason: str | None = None
    fewer_workers: str | None = None  # why fewer workers ran than wanted (quota, capacity, throttling)
    limits: dict[str, float] = field(default_factory=dict)  # seconds the fleet spent at each limit (scaling.limit_of)
    instance_seconds: float = 0.0  # the workers' lives, summed: what EC2 bills
    slot_seconds: float = 0.0  # the same times each worker's slots
    sample_seconds: float = 0.0  # the results' jobs' run times, summed: the work itself
    dead_report: list[dict[str, Any]] = field(default_factory=list)
    cost: float = 0.0  # EC2
    enqueued: int = 0
    adopted_workers: int = 0
    tokens: int = 0
    model_cost: float = 0.0
    unpriced_models: list[str] = field(default_factory=list)
    unmerged: list[str] = field(default_factory=list)  # tasks without a single result
    missing: list[dict[str, Any]] = field(default_factory=list)  # jobs not in the merged run, with why
    late_successes: list[str] = field(default_factory=list)  # job ids that succeeded after a dead letter
    report: Path | None = None  # runs/<fleet>/report.html, once written

    def masked(self, secrets: Iterable[str]) -> RunResult:
        """The result with every secret value masked in what it says (errors, reasons,
        merged logs' errors): the CLI prints it and --json writes it."""
        hidden = list(secrets)

        def said(value: Any) -> Any:
            if isinstance(value, str):
                return mask(value, hidden)
            if isinstance(value, list):
                return [said(v) for v in value]
            if isinstance(value, dict):
                return {k: said(v) for k, v in value.items()}
            return value

        changes = {f.name: said(getattr(self, f.name)) for f in fields(self) if f.name not in ("merged", "run_dir")}
        return replace(self, **changes, merged=[replace(m, why=mask(m.why, hidden)) for m in self.merged])

    def problems(self) -> list[str]:
        """Why the run is not complete and successful; empty when it is."""
        reasons = [self.stopped_reason] if self.stopped_reason else []
        dead = [r for r in self.dead_report if r.get("dead")]
        failed = [r for r in self.dead_report if not r.get("dead")]
        # Each kind of failure once, with its count and the jobs' own words (summaries).
        if dead:
            reasons.append(f"{len(dead)} job(s) dead-lettered after every attempt failed")
            reasons += [f"  {line}" for line in grouped(f"{r['error_class']}: {r.get('error', '')}" for r in dead)]
        if failed:
            classes = ", ".join(sorted({str(r["error_class"]) for r in failed}))
            reasons.append(f"{len(failed)} job(s) failed without a result ({classes})")
            reasons += [f"  {line}" for line in grouped(f"{r['error_class']}: {r.get('error', '')}" for r in failed)]
        reasons += [f"{name}: no results" for name in self.unmerged]
        reasons += [f"{m.task}: {m.why}" for m in self.merged if m.status != "success"]
        return reasons


def exit_status(result: RunResult) -> int:
    """0 only for a complete, successful run (RunResult.problems says why not)."""
    return 1 if result.problems() else 0
