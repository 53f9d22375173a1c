"""The run's outcome for scripts: what `ct-fleet eval --json` prints (docs/json.md).

A versioned pydantic model, so a consumer can check `schema_version` and the fields are
documented in one place. Additions keep the version; a removal or a change of meaning
bumps it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from .merged import merged_model
from .result import RunResult, exit_status
from .usage import total_tokens

SCHEMA_VERSION: Literal[1] = 1


class TaskSummary(BaseModel):
    """One merged Inspect log: a task x model of the fleet."""

    task: str
    model: str = Field(description="the model the task ran with (its merged log's)")
    status: str = Field(description='the merged log\'s status: "success" or "error"')
    log: str = Field(description="path of the merged Inspect log")
    samples_expected: int = Field(description="samples x epochs")
    samples_present: int
    completed: int = Field(description="samples present without an error (scored)")
    successes: int = Field(description="the same as completed, under its former name (kept for older scripts)")
    errors: int = Field(description="samples present with an error")
    missing: int = Field(description="samples x epochs with no result")
    metrics: dict[str, dict[str, float]] = Field(description="scorer -> metric -> value")
    tokens: int


class RunSummary(BaseModel):
    schema_version: Literal[1] = SCHEMA_VERSION
    fleet_id: str
    run_dir: str
    outcome: Literal["success", "failed", "interrupted"]
    exit_status: int
    problems: list[str] = Field(description="why the run is not complete and successful; empty when it is")
    jobs: int = 0
    already_done: int = 0
    retried_errors: Annotated[int, Field(description="errored samples an earlier run left, run again")] = 0
    enqueued: int = 0
    attempts: int = 0
    samples_resumed: Annotated[
        int, Field(description="samples that resumed from a checkpoint of an attempt that was lost (--checkpoint)")
    ] = 0
    model_calls_saved: Annotated[int, Field(description="model calls those checkpoints held: not made again")] = 0
    sample_seconds_saved: Annotated[
        float, Field(description="those samples' earlier attempts' time their checkpoints held: not spent again")
    ] = 0.0
    workers_launched: int = 0
    fewer_workers: Annotated[
        str | None, Field(description="why fewer workers ran than wanted (quota, capacity, throttling), if they did")
    ] = None
    elapsed_seconds: float = 0.0
    instance_hours: Annotated[float, Field(description="the workers' lives summed (what EC2 bills)")] = 0.0
    slot_hours: Annotated[float, Field(description="instance_hours times each worker's slots")] = 0.0
    sample_hours: Annotated[
        float, Field(description="the results' run times summed; slot_hours minus this is start-up and idle tail")
    ] = 0.0
    limits: Annotated[
        dict[str, float],
        Field(description="seconds the fleet spent held by each limit: CPU, model API, quota, capacity, max_workers"),
    ] = {}
    ec2_cost: Annotated[float, Field(description="USD, EC2 workers")] = 0.0
    tokens: int = 0
    model_cost: Annotated[float, Field(description="USD, model tokens priced by Inspect's model info")] = 0.0
    tasks: list[TaskSummary] = []
    jobs_without_result: Annotated[int, Field(description="failed or dead-lettered jobs")] = 0
    report: Annotated[
        str | None, Field(description="path of the run report (HTML; its data in report.json beside it)")
    ] = None


def run_summary(result: RunResult) -> RunSummary:
    status = exit_status(result)
    return RunSummary(
        fleet_id=result.fleet_id,
        run_dir=str(result.run_dir),
        outcome="failed" if status else "success",
        exit_status=status,
        problems=result.problems(),
        jobs=result.jobs,
        already_done=result.resumed,
        retried_errors=result.retried_errors,
        enqueued=result.enqueued,
        attempts=result.attempts,
        samples_resumed=result.samples_resumed,
        model_calls_saved=result.model_calls_saved,
        sample_seconds_saved=result.sample_seconds_saved,
        workers_launched=result.workers_launched,
        fewer_workers=result.fewer_workers,
        elapsed_seconds=round(result.elapsed, 3),
        instance_hours=round(result.instance_seconds / 3600, 4),
        slot_hours=round(result.slot_seconds / 3600, 4),
        sample_hours=round(result.sample_seconds / 3600, 4),
        limits=result.limits,
        ec2_cost=result.cost,
        tokens=result.tokens,
        model_cost=result.model_cost,
        tasks=[
            TaskSummary(
                task=m.task,
                model=merged_model(m),
                status=m.status,
                log=str(m.path),
                samples_expected=m.samples_expected,
                samples_present=m.samples_present,
                completed=m.samples_present - len(m.errors),
                successes=m.samples_present - len(m.errors),
                errors=len(m.errors),
                missing=len(m.missing),
                metrics=m.metrics,
                tokens=total_tokens(m.model_usage),
            )
            for m in result.merged
        ],
        jobs_without_result=len(result.dead_report),
        report=str(result.report) if result.report else None,
    )


def interrupted_summary(fleet_id: str, run_dir: str, reason: str, status: int) -> RunSummary:
    return RunSummary(fleet_id=fleet_id, run_dir=run_dir, outcome="interrupted", exit_status=status, problems=[reason])
