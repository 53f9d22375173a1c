"""The run report's checkpoint figures (report.json "checkpoints"), from the done reports
attempts.jsonl keeps: what resuming saved and what checkpointing cost, each as the
workers' Inspect logs say it (worker/checkpoints.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class CheckpointFigures(BaseModel):
    samples_resumed: int = Field(description="results whose sample resumed from a checkpoint of a lost attempt")
    model_calls_saved: int = Field(description="model calls those checkpoints held: not made again")
    seconds_saved: float = Field(0.0, description="the samples' time those checkpoints held: not spent again")
    samples_checkpointed: int = Field(description="results whose sample took checkpoints")
    checkpoints: int = Field(description="checkpoints those samples committed (those they resumed from included)")
    seconds: float = Field(description="the agents' wait for them, to the local commit (the copy to S3 not included)")
    bytes_added: int = Field(description="bytes they added to the samples' restic repositories")

    @property
    def seconds_each(self) -> float | None:
        return self.seconds / self.checkpoints if self.checkpoints else None


def checkpoint_figures(attempts: list[dict[str, Any]]) -> CheckpointFigures | None:
    """From the run's done reports with a result (the last of each job): None when no job
    took a checkpoint (the run was not asked to, or its reports predate the figures)."""
    final: dict[str, dict[str, Any]] = {}
    for a in attempts:
        if a["outcome"] in ("success", "sample_error"):
            final[a["job_id"]] = a
    resumed = [a for a in final.values() if a.get("calls_restored") is not None]
    costs = [a["checkpoints"] for a in final.values() if isinstance(a.get("checkpoints"), dict)]
    if not resumed and not costs:
        return None
    return CheckpointFigures(
        samples_resumed=len(resumed),
        model_calls_saved=sum(a["calls_restored"] for a in resumed),
        seconds_saved=round(sum(float(a.get("seconds_restored") or 0) for a in resumed), 3),
        samples_checkpointed=sum(1 for c in costs if c.get("count")),
        checkpoints=sum(int(c.get("count") or 0) for c in costs),
        seconds=round(sum(float(c.get("seconds") or 0) for c in costs), 3),
        bytes_added=sum(int(c.get("bytes") or 0) for c in costs),
    )
