"""A fleet's results -> one merged log per Inspect task, reading like `inspect eval` of it.

Per-job logs live in runs/<fleet>/jobs/<job_id>.evaljob (a suffix `inspect view` does not
list, so opening runs/<fleet>/ shows only the merged runs in merged/). Each task of the
manifest is merged from its own jobs' logs, with its intended sample ids (dataset order,
original types) and epochs, and a header that says what a direct run would: the tasks'
code's own git revision, the task file as the user named it, the user's --limit/--sample-id.
The same results always merge to the same ids, order and header ids.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ...evallog import Expected
from ...inspect_options import shuffle_of
from ...protocol import Manifest, ManifestTask, run_layout
from .local_results import expected_result

if TYPE_CHECKING:
    from ... import merge


def eval_overrides(manifest: Manifest, task: ManifestTask) -> dict[str, Any]:
    # Set even when None: a job's own log may name whatever git repo its worker ran in.
    overrides: dict[str, Any] = {"revision": manifest.revision}
    if task.task_file:
        overrides["task_file"] = task.task_file
    if manifest.inspect_options.get("solver_root"):
        overrides["solver"] = manifest.inspect_options["solver"]  # as given, not where a worker had it
    tags = manifest.inspect_options.get("tags")
    if isinstance(tags, str):
        # Inspect keeps them as given; a job's eval() may reorder them (it dedupes through a set)
        overrides["tags"] = list(dict.fromkeys(t.strip() for t in tags.split(",") if t.strip()))
    config: dict[str, Any] = {}
    if task.limit is not None:
        config = {"limit": task.limit, "sample_id": None}
    elif task.sample_id is not None:
        config = {"sample_id": list(task.sample_id), "limit": None}
    shuffle = shuffle_of(manifest.inspect_options.get("sample_shuffle"))
    if shuffle is not None:
        config["sample_shuffle"] = shuffle
    # A direct run of several models runs as many tasks at once, and records it.
    models = manifest.models
    max_tasks = manifest.inspect_options.get("max_tasks") or (len(models) if len(models) > 1 else None)
    if max_tasks:
        config["max_tasks"] = max_tasks
    if config:
        overrides["config"] = config
    return overrides


def stems(manifest: Manifest) -> dict[str, str]:
    counts: dict[str, int] = {}
    for task in manifest.tasks:
        counts[task.name] = counts.get(task.name, 0) + 1
    return {t.key: t.name if counts[t.name] == 1 else f"{t.name}-{t.key[:8]}" for t in manifest.tasks}


def record_span(run_dir: Path, started: float, completed: float) -> None:
    """The run's own span, for the merged header: a direct `inspect eval` spans the whole
    eval, while the jobs' logs span only their samples (not launch, boot and teardown)."""
    span = {"started_at": _iso(started), "completed_at": _iso(completed)}
    (run_dir / run_layout.SPAN).write_text(json.dumps(span))


def recorded_span(run_dir: Path) -> tuple[str, str] | None:
    try:
        span = json.loads((run_dir / run_layout.SPAN).read_text())
        return str(span["started_at"]), str(span["completed_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # never run here (results fetched from S3): the samples' own span


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")  # as Inspect writes them


class FleetMerge:
    """A fleet's merge kept across its run: one `merge.Merger` per task, so each merge reads
    only the results that arrived since the one before (the live merges', then the end's)."""

    def __init__(self, manifest: Manifest, run_dir: Path, out_dir: Path | None = None) -> None:
        self.manifest, self.run_dir = manifest, run_dir
        self.out_dir = out_dir or run_dir / run_layout.MERGED
        self._mergers: dict[str, merge.Merger] = {}

    def merge(
        self, on_skip: Callable[[Path, str], None] | None = None, *, live: bool = False
    ) -> list[merge.MergedTask]:
        """One merged log per task that has any result (a task with none is all missing);
        on_skip(path, why) hears of each result the merge could not read and left out;
        `live`: the results so far, in logs marked "started"."""
        from ... import merge  # imports inspect_ai (seconds): only when there is something to merge

        clear_dead_writers(self.out_dir)
        names = stems(self.manifest)
        span = recorded_span(self.run_dir)
        # One listing of jobs/, not a stat per job: the spool stats each result it is given.
        present = set(run_layout.job_logs(self.run_dir))
        inputs_of: dict[str, list[Path]] = {}
        tasks = {task.key: task for task in self.manifest.tasks}
        expected: dict[Path, Expected] = {}
        for job in self.manifest.jobs:
            path = run_layout.job_log(self.run_dir, job.job_id)
            if path in present:
                inputs_of.setdefault(job.task, []).append(path)
                expected[path] = expected_result(self.manifest.model, job, tasks[job.task])

        def check(path: Path, header: dict[str, Any], samples: list[tuple[Any, Any]]) -> str | None:
            # A result is its job's, or it is left out (merge and view read results too)
            wrong = expected[path].wrong_log(header, samples)
            return None if wrong is None else f"is not the result of job {path.stem}: it {wrong}"

        merged: list[merge.MergedTask] = []
        fleet_id = self.manifest.fleet_id
        for task in self.manifest.tasks:
            inputs = inputs_of.get(task.key)
            if not inputs:
                continue
            merger = self._mergers.get(task.key)
            if merger is None:
                merger = self._mergers[task.key] = merge.Merger()
            merger.add(inputs, check)
            results = merger.write(
                self.out_dir,
                sample_ids=task.sample_ids,
                epochs=self.manifest.epochs_of(task),
                name=names[task.key],
                # Ids of the fleet's own: another fleet of the same inputs (new_fleet=true)
                # is another run; a merge again of this one keeps them.
                eval_overrides={
                    **eval_overrides(self.manifest, task),
                    "eval_id": merge.short_id("eval", fleet_id, task.key),
                    "run_id": merge.short_id("run", fleet_id),
                    "task_id": merge.short_id("task", fleet_id, task.key),
                },
                span=span,
                on_skip=on_skip,
                live=live,
            )
            merged.extend(replace(m, source=task.key) for m in results)
        return merged

    def close(self) -> None:
        for merger in self._mergers.values():
            merger.close()
        self._mergers.clear()

    def __enter__(self) -> FleetMerge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_fleet(
    manifest: Manifest,
    run_dir: Path,
    out_dir: Path | None = None,
    on_skip: Callable[[Path, str], None] | None = None,
    *,
    live: bool = False,
) -> list[merge.MergedTask]:
    """The fleet's results merged once, from scratch (see FleetMerge.merge)."""
    with FleetMerge(manifest, run_dir, out_dir) as fleet_merge:
        return fleet_merge.merge(on_skip, live=live)


def publish(paths: Sequence[Path], log_dir: Path, log_format: str) -> list[Path]:
    """The merged logs, also in the user's --log-dir (as `inspect eval --log-dir` leaves them):
    copied whole, or converted by Inspect to its json format. Each lands under a temporary
    name renamed into place, so a reader there never sees half a log."""
    import shutil

    log_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for path in paths:
        dest = log_dir / (path.stem + (".json" if log_format == "json" else ".eval"))
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        if log_format == "json":
            from inspect_ai.log import read_eval_log, write_eval_log

            write_eval_log(read_eval_log(str(path)), str(tmp), format="json")
        else:
            shutil.copyfile(path, tmp)
        os.replace(tmp, dest)
        out.append(dest)
    return out


def clear_dead_writers(out_dir: Path) -> None:
    """Delete the temp files of merges whose process died mid-write (SIGKILL, OOM, power).

    merge/write.py writes each log to `.<name>.<pid>.<thread>.tmp`, renamed into place once
    whole; a killed writer leaves its temp file behind, and nothing else would ever remove
    it. A live writer's is kept: `ct-fleet view` may merge while the run's own merge writes.
    """
    for path in out_dir.glob(".*.tmp") if out_dir.is_dir() else ():
        _, _, ids = path.name[: -len(".tmp")].rpartition(".eval.")
        pid = ids.partition(".")[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            path.unlink(missing_ok=True)


def unmerged(manifest: Manifest, merged: Sequence[merge.MergedTask]) -> list[str]:
    """The names of the tasks without a merged log. Matched by task key, never by file
    name: a name is not its file's stem (`inspect_evals/foo` is written as `inspect_evals_foo`)."""
    done = {m.source for m in merged}
    return [t.name for t in manifest.tasks if t.key not in done]
