"""What a fleet's merged logs say of each task x model, read from their headers alone.

`status`, `fleets` and the run report show each task x model of a fleet with its metrics.
They read runs/<fleet>/merged/*.eval's `header.json` (evallog.read_header: no Inspect
import, about a millisecond a log), never the samples: the header holds the status, the
sample counts and the results a direct `inspect eval` records (`results.scores[].metrics`).
While a run goes on they are the results so far (status "started").

A merged log is matched to its task of the manifest by what its header says it ran (the
task's name and its model), not by its file name, which is the merge's to choose.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ...evallog import read_header
from ...protocol import Manifest, run_layout
from .usage import total_tokens

if TYPE_CHECKING:
    from ...merge import MergedTask


class MergedResult(BaseModel):
    """One merged Inspect log, as its header tells it."""

    log: str = Field(description="path of the merged Inspect log")
    task: str
    model: str
    status: str = Field(description='"success" or "error"; "started": the results so far of a run that goes on')
    samples: int = Field(description="samples x epochs the merged run intends")
    completed: int = Field(description="of them, samples scored without an error")
    error: str | None = Field(
        default=None, description="why the merged run is an error, e.g. '2 of 12 samples missing'"
    )
    metrics: dict[str, dict[str, float]] = Field(description="scorer -> metric -> value")
    tokens: int = 0


def read_merged(path: Path) -> MergedResult | None:
    """The merged log at `path`, or None when it is not a readable log."""
    header = read_header(path)
    if header is None:
        return None
    ev = header.get("eval") or {}
    results = header.get("results") or {}
    error = header.get("error") or {}
    dataset = ev.get("dataset") or {}
    epochs = (ev.get("config") or {}).get("epochs") or 1
    intended = results.get("total_samples")
    if intended is None:  # no results yet: the selection the header records
        intended = len(dataset.get("sample_ids") or []) * epochs
    return MergedResult(
        log=str(path),
        task=str(ev.get("task") or ""),
        model=str(ev.get("model") or ""),
        status=str(header.get("status") or ""),
        samples=int(intended or 0),
        completed=int(results.get("completed_samples") or 0),
        error=str(error["message"]) if error.get("message") else None,
        metrics=metrics_of(results),
        tokens=total_tokens((header.get("stats") or {}).get("model_usage") or {}),
    )


def metrics_of(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """A header's `results` as scorer -> metric -> value, keyed as the merge keys them
    (merge.results.metrics_table): a scorer named twice (one per reducer) as `name/reducer`."""
    table: dict[str, dict[str, float]] = {}
    for score in results.get("scores") or []:
        key = str(score.get("name"))
        if key in table:
            key = f"{score.get('name')}/{score.get('reducer') or 'unreduced'}"
        table[key] = {
            name: float(metric["value"])
            for name, metric in (score.get("metrics") or {}).items()
            if isinstance(metric, dict)
            and isinstance(metric.get("value"), int | float)
            and not isinstance(metric.get("value"), bool)
        }
    return table


def merged_model(merged: MergedTask) -> str:
    """The model of a merge's outcome, from its log's header (a MergedTask names none)."""
    header = read_header(merged.path) or {}
    return str((header.get("eval") or {}).get("model") or "")


def merged_results(run_dir: Path) -> list[MergedResult]:
    """Every readable merged log of the fleet in run_dir, by file name."""
    found = (read_merged(p) for p in sorted((run_dir / run_layout.MERGED).glob("*.eval")))
    return [r for r in found if r is not None]


def same_model(a: str, b: str) -> bool:
    """Inspect records `--model none` as `none/none`."""
    return a == b or {a, b} == {"none", "none/none"}


def by_task(manifest: Manifest, results: list[MergedResult]) -> dict[str, MergedResult]:
    """Each task of the manifest (by key) -> its merged log, for the tasks that have one.

    A log is its task's when it ran the task's name with the task's model; tasks of one
    name and model (other arguments) are told apart by the key in their file name
    (`<name>-<key[:8]>`, controller/fleet/merging.stems). Then, for a task whose logs name
    it otherwise: a model's only task left takes that model's only log left. A log that
    matches no task, or several equally, is shown for none: no metrics rather than another
    task's."""
    found: dict[str, MergedResult] = {}
    left = list(results)
    for task in manifest.tasks:
        model = manifest.model_of(task)
        hits = [r for r in left if r.task == task.name and same_model(r.model, model)]
        if len(hits) > 1:
            hits = [r for r in hits if Path(r.log).stem.endswith(task.key[:8])]
        if len(hits) == 1:
            found[task.key] = hits[0]
            left.remove(hits[0])
    for model in manifest.models:
        tasks = [t for t in manifest.tasks if t.key not in found and same_model(manifest.model_of(t), model)]
        logs = [r for r in left if same_model(r.model, model)]
        if len(tasks) == 1 and len(logs) == 1:
            found[tasks[0].key] = logs[0]
            left.remove(logs[0])
    return found


def policy_of(manifest: Manifest, task_setting: str | None) -> str | None:
    """The policy a task runs under: a setting's tasks run the fleet's policy; a plain task none."""
    return manifest.policy if task_setting is not None else None


def metrics_text(metrics: dict[str, dict[str, float]]) -> str:
    """Every scorer's metrics on one line: `match accuracy 0.5, stderr 0.289; includes accuracy 1`."""
    parts = []
    for scorer, values in metrics.items():
        if values:
            parts.append(f"{scorer} " + ", ".join(f"{name} {value:.3g}" for name, value in values.items()))
    return "; ".join(parts) or "-"
