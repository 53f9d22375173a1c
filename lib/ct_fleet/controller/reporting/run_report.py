"""The run report's data (runs/<fleet>/report.json), built from what runs/<fleet>/ holds
after a run (timeline.py's records, the bootstrap logs, the results' headers, the merged
logs' headers for each task x model's metrics), so the report of an EC2 fleet needs
neither S3 nor the workers.

Times are seconds since the run began (`started_at`, epoch seconds). The workers report
no slot number, so a worker's jobs are packed into its slots as they ran: each job goes
to the lowest slot free at its start, which is what a slot is (one job at a time).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ...evallog import read_header
from ...protocol import Manifest, run_layout, steplog
from .checkpoints import CheckpointFigures, checkpoint_figures
from .merged import by_task, merged_results, policy_of
from .missing import rerun_command
from .timeline import read_lines, read_phases
from .usage import MODEL_PRICES, price_table, usage_cost

REPORT_SCHEMA_VERSION: Literal[1] = 1
FINAL = ("success", "sample_error", "failed")
SLOWEST = 10
# The phase each recorded mark begins (fleet/phases.py), in run order.
PHASE_LABELS = {
    "start": "start: cloud, Docker, resume, enqueue",
    "enqueue": "launch the first workers",
    "tracking": "jobs (until every job has an outcome)",
    "verify": "verify the results",
    "end-wait": "workers leave, teardown",
    "merge": "merge",
}


class Lane(BaseModel):
    instance_id: str
    slot: int


class Bar(BaseModel):
    job_id: str
    task: str
    sample_id: str | int
    epoch: int
    instance_id: str
    lane: int = Field(description="index into lanes")
    start: float
    end: float
    outcome: str = Field(description="success, sample_error, failed, retry or skipped_duplicate")
    attempt: int = Field(description="the job's delivery count (1: its first)")
    error_class: str | None = None
    error: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Worker(BaseModel):
    instance_id: str
    why: str | None = Field(
        default=None,
        description="first, replacement, scale_up, shortfall, spot_notice or rebalance (replacing one); None: adopted",
    )
    slots: int
    launched: float | None = None
    booted: float | None = Field(default=None, description="its bootstrap log's first line (UTC, whole seconds)")
    ready: float | None = Field(default=None, description="its job loop started (step run-worker)")
    ended: float | None = None
    spot_notice: float | None = None
    rebalance: float | None = Field(default=None, description="its rebalance recommendation (it then drained)")
    failed_step: str | None = None


class Phase(BaseModel):
    phase: str
    label: str
    start: float
    seconds: float


class FailureClass(BaseModel):
    error_class: str
    error: str
    attempts: int
    jobs: int
    repro: str = Field(description="reruns one of its jobs on this machine")


class CostPoint(BaseModel):
    at: float
    ec2: float
    model: float


class TaskResult(BaseModel):
    """A task x model of the fleet with its merged log's results (merged.py)."""

    task: str
    model: str
    policy: str | None = Field(default=None, description="setting runs: the policy the task ran under")
    jobs: int = Field(description="samples x epochs")
    log: str | None = Field(
        default=None, description="its merged Inspect log, relative to the run directory; None: no result of it merged"
    )
    status: str | None = Field(default=None, description="the merged log's: success, error, started (live)")
    samples: int = Field(default=0, description="samples x epochs the merged run intends")
    completed: int = Field(default=0, description="samples scored without an error")
    error: str | None = Field(default=None, description="why the merged run is an error")
    metrics: dict[str, dict[str, float]] = Field(default={}, description="scorer -> metric -> value")
    tokens: int = 0


class Predicted(BaseModel):
    """A job's place in the longest-first queue (planning/history.py) against how it ran."""

    job_id: str
    sample_id: str | int
    predicted: float = Field(description="expected seconds (from earlier runs, or their median)")
    from_history: bool
    queue_rank: int = Field(description="its place in the queue, 0 first")
    actual: float | None = Field(default=None, description="seconds its final attempt ran")
    start_rank: int | None = Field(default=None, description="its place in the order the jobs started")


class RunReport(BaseModel):
    schema_version: Literal[1] = REPORT_SCHEMA_VERSION
    fleet_id: str
    started_at: float = Field(description="epoch seconds: the run's time 0")
    generated_at: float
    jobs: int
    outcomes: dict[str, int] = Field(description="jobs by their last outcome this run; resumed: done by an earlier run")
    hourly_price: float
    lanes: list[Lane]
    bars: list[Bar]
    workers: list[Worker]
    phases: list[Phase]
    throughput: list[int] = Field(description="results (final outcomes) completed in each minute of the run")
    cost: list[CostPoint] = Field(description="USD so far: EC2 instance time, model tokens (where priced)")
    failures: list[FailureClass]
    slowest: list[Bar]
    results: list[TaskResult] = Field(default=[], description="each task x model with its merged log's metrics")
    checkpoints: CheckpointFigures | None = Field(
        default=None, description="--checkpoint runs: what resuming saved and checkpointing cost (this run's results)"
    )
    order: list[Predicted] = Field(default=[], description="the longest-first queue, predicted against actual")


def build_report(run_dir: Path, model_prices: Path = MODEL_PRICES) -> RunReport:
    manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())
    marks = read_phases(run_dir)
    attempts = _dedup(read_lines(run_dir / run_layout.ATTEMPTS))
    events = read_lines(run_dir / run_layout.WORKERS)
    t0 = marks.get("start") or min([a["received_at"] or a["finished_at"] for a in attempts], default=time.time())
    # Records append across reruns of the fleet: the report is of the last run.
    attempts = [a for a in attempts if (a["finished_at"] or 0) >= t0]
    events = [e for e in events if e["at"] >= t0]
    workers = _workers(run_dir, events, attempts, t0)
    lanes, bars = _pack(attempts, workers, t0)
    end = max([marks.get("done", 0.0) - t0, *(b.end for b in bars)], default=0.0)
    price = max((float(e.get("hourly_price") or 0) for e in events if e["event"] == "launched"), default=0.0)
    return RunReport(
        fleet_id=manifest.fleet_id,
        started_at=t0,
        generated_at=time.time(),
        jobs=len(manifest.jobs),
        outcomes=_outcomes(manifest, bars, run_dir),
        hourly_price=price,
        lanes=lanes,
        bars=bars,
        workers=workers,
        phases=_phases(marks, t0),
        throughput=_throughput(bars),
        cost=_cost(run_dir, bars, workers, price, end, price_table(model_prices)),
        failures=_failures(manifest.fleet_id, bars),
        slowest=sorted((b for b in bars if b.outcome in FINAL), key=lambda b: -b.seconds)[:SLOWEST],
        results=_results(manifest, run_dir),
        checkpoints=checkpoint_figures(attempts),
        order=predicted_order(run_dir, bars),
    )


def predicted_order(run_dir: Path, bars: list[Bar]) -> list[Predicted]:
    """order.json's prediction, each job with its final attempt's seconds and start rank."""
    try:
        rows = json.loads((run_dir / run_layout.ORDER).read_text())
    except (OSError, ValueError):
        return []
    final = {b.job_id: b for b in bars if b.outcome in FINAL}
    started = {job_id: i for i, job_id in enumerate(sorted(final, key=lambda j: final[j].start))}
    out = []
    for rank, row in enumerate(rows if isinstance(rows, list) else []):
        job_id, seconds, known = row
        bar = final.get(job_id)
        out.append(
            Predicted(
                job_id=job_id,
                sample_id=bar.sample_id if bar else "",
                predicted=seconds,
                from_history=known,
                queue_rank=rank,
                actual=bar.seconds if bar else None,
                start_rank=started.get(job_id),
            )
        )
    return out


def _results(manifest: Manifest, run_dir: Path) -> list[TaskResult]:
    """Each task of the manifest (a task x model), with what its merged log says, if it has one."""
    merged = by_task(manifest, merged_results(run_dir))
    jobs = Counter(j.task for j in manifest.jobs)
    rows = []
    for task in manifest.tasks:
        log = merged.get(task.key)
        found = log.model_dump(exclude={"task", "model"}) if log else {}
        if log:  # the report travels with its run directory (copied, fetched elsewhere)
            found["log"] = (
                Path(log.log).relative_to(run_dir).as_posix() if Path(log.log).is_relative_to(run_dir) else log.log
            )
        rows.append(
            TaskResult(
                task=task.name,
                model=manifest.model_of(task),
                policy=policy_of(manifest, task.setting),
                jobs=jobs[task.key],
                **found,
            )
        )
    return rows


def _dedup(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Delivery is at least once: the same report may arrive twice."""
    seen: set[tuple[Any, ...]] = set()
    unique = []
    for a in attempts:
        key = (a["job_id"], a["worker_id"], a["started_at"], a["outcome"])
        if key not in seen and a["finished_at"] is not None:
            seen.add(key)
            unique.append(a)
    return unique


def _utc(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _boot(run_dir: Path, instance_id: str, t0: float, launched: float | None) -> dict[str, Any]:
    """When the worker's bootstrap began and its job loop started, from its log's step lines: whole
    seconds, cut down, so neither is put before what it follows (one may log its launch's second)."""
    path = run_dir / run_layout.BOOT_LOGS / f"{instance_id}-bootstrap.log"
    if not path.exists():
        return {}
    text = path.read_text(errors="replace")
    lines = [line for line in map(steplog.parse_line, text.splitlines()) if line is not None]
    ready = [s for s in steplog.steps(text.splitlines()) if s.name == "run-worker" and s.event == "start"]
    failure = steplog.first_failure(text)
    floor = float("-inf") if launched is None else launched
    booted = max(_utc(lines[0].time) - t0, floor) if lines else None
    return {
        "booted": booted,
        "ready": max(_utc(ready[0].time) - t0, floor if booted is None else booted) if ready else None,
        "failed_step": failure.step.name if failure else None,
    }


def _workers(run_dir: Path, events: list[dict[str, Any]], attempts: list[dict[str, Any]], t0: float) -> list[Worker]:
    found: dict[str, dict[str, Any]] = {}
    for e in events:
        w = found.setdefault(e["instance_id"], {"instance_id": e["instance_id"], "slots": 0})
        if e["event"] == "launched":
            w.update(why=e.get("why"), slots=int(e.get("slots") or 0), launched=e["at"] - t0)
        elif e["event"] in ("ended", "spot_notice", "rebalance"):
            w.setdefault(e["event"], e["at"] - t0)
    for a in attempts:  # an adopted worker was launched by an earlier controller
        found.setdefault(a["instance_id"], {"instance_id": a["instance_id"], "slots": 0})
    workers = []
    for instance_id, w in found.items():
        workers.append(Worker(**w, **_boot(run_dir, instance_id, t0, w.get("launched"))))
    return sorted(workers, key=lambda w: (w.launched is None, w.launched or 0.0, w.instance_id))


def _pack(attempts: list[dict[str, Any]], workers: list[Worker], t0: float) -> tuple[list[Lane], list[Bar]]:
    """Lanes: each worker's slots in launch order; each attempt in the lowest slot free at its start."""
    by_instance: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in sorted(attempts, key=lambda a: (a["started_at"] or a["finished_at"], a["finished_at"])):
        by_instance[a["instance_id"]].append(a)
    lanes: list[Lane] = []
    bars: list[Bar] = []
    for worker in workers:
        busy_until: list[float] = []
        first_lane = len(lanes)
        for a in by_instance[worker.instance_id]:
            start, end = (a["started_at"] or a["finished_at"]) - t0, a["finished_at"] - t0
            slot = next((i for i, until in enumerate(busy_until) if until <= start), len(busy_until))
            if slot == len(busy_until):
                busy_until.append(end)
            else:
                busy_until[slot] = end
            bars.append(
                Bar(
                    job_id=a["job_id"],
                    task=a["task"],
                    sample_id=a["sample_id"],
                    epoch=a["epoch"],
                    instance_id=worker.instance_id,
                    lane=first_lane + slot,
                    start=round(start, 3),
                    end=round(end, 3),
                    outcome=a["outcome"],
                    attempt=a["receive_count"],
                    error_class=a["error_class"],
                    error=a["error"],
                )
            )
        slots = max(worker.slots, len(busy_until))
        lanes += [Lane(instance_id=worker.instance_id, slot=s) for s in range(slots)]
    return lanes, bars


def _outcomes(manifest: Manifest, bars: list[Bar], run_dir: Path) -> dict[str, int]:
    last: dict[str, str] = {}
    for bar in sorted(bars, key=lambda b: b.end):
        if bar.outcome in FINAL or bar.job_id not in last:
            last[bar.job_id] = bar.outcome
    for job in manifest.jobs:
        if job.job_id not in last and run_layout.job_log(run_dir, job.job_id).exists():
            last[job.job_id] = "resumed"
    return dict(Counter(last.values()))


def _phases(marks: dict[str, float], t0: float) -> list[Phase]:
    order = [p for p in [*PHASE_LABELS, "done"] if p in marks]
    return [
        Phase(phase=p, label=PHASE_LABELS[p], start=round(marks[p] - t0, 3), seconds=round(marks[n] - marks[p], 3))
        for p, n in zip(order, order[1:], strict=False)
    ]


def _throughput(bars: list[Bar]) -> list[int]:
    ends = [b.end for b in bars if b.outcome in FINAL]
    minutes = [0] * (int(max(ends, default=0) // 60) + 1) if ends else []
    for end in ends:
        minutes[int(end // 60)] += 1
    return minutes


def _job_model_cost(run_dir: Path, job_id: str, table: dict[str, dict[str, float]]) -> float:
    header = read_header(run_layout.job_log(run_dir, job_id)) or {}
    usage = (header.get("stats") or {}).get("model_usage") or {}
    return sum(usage_cost(model, u, table) or 0.0 for model, u in usage.items())


def _cost(
    run_dir: Path, bars: list[Bar], workers: list[Worker], price: float, end: float, table: dict[str, dict[str, float]]
) -> list[CostPoint]:
    """Cost so far at every event: EC2 by instance-seconds (billed per second), model tokens
    at the time each result came (each job once, from its result's header)."""
    model_at: list[tuple[float, float]] = []
    counted: set[str] = set()
    for bar in sorted(bars, key=lambda b: b.end):
        if bar.outcome in ("success", "sample_error") and bar.job_id not in counted:
            counted.add(bar.job_id)
            model_at.append((bar.end, _job_model_cost(run_dir, bar.job_id, table)))
    spans = [(w.launched, w.ended if w.ended is not None else end) for w in workers if w.launched is not None]
    times = sorted({0.0, end, *(t for span in spans for t in span), *(t for t, _ in model_at)})
    points = []
    for t in times:
        ec2 = sum(max(0.0, min(t, stop) - start) for start, stop in spans) / 3600 * price
        model = sum(cost for at, cost in model_at if at <= t)
        points.append(CostPoint(at=round(t, 3), ec2=round(ec2, 6), model=round(model, 6)))
    return points


def _failures(fleet_id: str, bars: list[Bar]) -> list[FailureClass]:
    """Failed attempts by class and message, the commonest first, each with a repro command."""
    groups: dict[tuple[str, str], list[Bar]] = defaultdict(list)
    for bar in bars:
        if bar.outcome in ("failed", "retry", "sample_error"):
            groups[(bar.error_class or bar.outcome, bar.error or "no error reported")].append(bar)
    return [
        FailureClass(
            error_class=cls,
            error=error,
            attempts=len(group),
            jobs=len({b.job_id for b in group}),
            repro=rerun_command(fleet_id, group[0].job_id),
        )
        for (cls, error), group in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]
