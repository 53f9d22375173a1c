"""The longest first: each job's expected duration from earlier runs, and the queue's order.

A run's end is its last job's end. Enqueued in plan order, the few samples that take ten
times the median start wherever they happen to be, often last, and the run waits on them
with its other slots idle. Enqueued longest first, they start first and the short ones fill
the slots around them (longest processing time first, within 4/3 of the best makespan).

The expected duration of a (task, sample id, epoch) comes from earlier runs of the same
task identity (its spec, root, arguments and setting: not its model, which may differ),
each run's sample-seconds.json (written at its end from its attempts.jsonl), and from this
fleet's own attempts.jsonl first: a rerun of a partly done fleet uses its own first
attempt's durations. An epoch not seen goes by its sample's other epochs; a sample with no
history by the median of those that have one; with no history at all, the plan's order
is kept. What was predicted is kept in
order.json, which the run report sets against what each job took.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...protocol import Manifest, run_layout
from .jobs import FleetTask, Job

SAMPLE_SECONDS = run_layout.SAMPLE_SECONDS  # identity -> "sample id (JSON)#epoch" -> seconds
ORDER = run_layout.ORDER
FINAL = ("success", "sample_error")


def identity(task_spec: str, task_root: str, task_args: dict[str, Any], setting: str | None) -> str:
    text = json.dumps([task_spec, task_root, task_args, setting], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _identity_of(task: Any) -> str:
    return identity(task.task_spec, task.task_root, task.task_args, task.setting)


def _sample_key(sample_id: object) -> str:
    return json.dumps(sample_id)


def _job_key(sample_id: object, epoch: object) -> str:
    return f"{_sample_key(sample_id)}#{epoch}"


def _read_lines(path: Path) -> Iterable[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


def seconds_of_run(run_dir: Path) -> dict[str, dict[str, float]]:
    """identity -> sample -> median seconds of its finished attempts, from the run's records."""
    try:
        manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    identities = {t.key: _identity_of(t) for t in manifest.tasks}
    seen: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in _read_lines(run_dir / run_layout.ATTEMPTS):
        started, finished = row.get("started_at"), row.get("finished_at")
        who = identities.get(str(row.get("task")))
        if row.get("outcome") in FINAL and who and isinstance(started, float) and isinstance(finished, float):
            seen[who][_job_key(row.get("sample_id"), row.get("epoch"))].append(finished - started)
    return {who: {s: statistics.median(v) for s, v in samples.items()} for who, samples in seen.items()}


def record_sample_seconds(run_dir: Path) -> None:
    """At a run's end: its samples' durations, for later runs' order."""
    found = seconds_of_run(run_dir)
    if found:
        (run_dir / SAMPLE_SECONDS).write_text(json.dumps(found))


def identities(tasks: Sequence[FleetTask]) -> list[str]:
    return list(dict.fromkeys(_identity_of(t) for t in tasks))


def expected_seconds(
    run_dir: Path, tasks: Sequence[FleetTask], remote: Mapping[str, Mapping[str, float]] | None = None
) -> dict[tuple[str, str], float]:
    """(task key, "sample#epoch") -> expected seconds: this fleet's own records first, then
    the mean over the other runs beside it and `remote` (identity -> seconds, from S3)."""
    wanted = {_identity_of(t): t.key for t in tasks}
    others: dict[tuple[str, str], list[float]] = defaultdict(list)
    for who, samples in (remote or {}).items():
        if who in wanted:
            for sample, seconds in samples.items():
                others[(wanted[who], sample)].append(float(seconds))
    for path in run_dir.parent.glob(f"*/{SAMPLE_SECONDS}"):
        if path.parent == run_dir:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for who, samples in data.items() if isinstance(data, dict) else ():
            if who in wanted and isinstance(samples, dict):
                for sample, seconds in samples.items():
                    if isinstance(seconds, int | float):
                        others[(wanted[who], sample)].append(float(seconds))
    expected = {key: statistics.fmean(v) for key, v in others.items()}
    for who, samples in seconds_of_run(run_dir).items():
        if who in wanted:
            expected.update({(wanted[who], sample): s for sample, s in samples.items()})
    return expected


def longest_first(
    run_dir: Path,
    tasks: Sequence[FleetTask],
    jobs: list[Job],
    remote: Mapping[str, Mapping[str, float]] | None = None,
) -> list[Job]:
    """`jobs` longest expected first (the rest by the median), the prediction kept in
    order.json; in plan order when no job has a history."""
    expected = expected_seconds(run_dir, tasks, remote)
    by_sample: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (task, key), seconds in expected.items():
        by_sample[(task, key.rpartition("#")[0])].append(seconds)
    known = {}
    for j in jobs:
        exact = expected.get((j.task, _job_key(j.sample_id, j.epoch)))
        other_epochs = by_sample.get((j.task, _sample_key(j.sample_id)))
        if exact is not None or other_epochs:
            known[j.job_id] = exact if exact is not None else statistics.fmean(other_epochs or [0.0])
    if not known:
        (run_dir / ORDER).unlink(missing_ok=True)
        return jobs
    median = statistics.median(known.values())
    ordered = sorted(jobs, key=lambda j: -known.get(j.job_id, median))
    (run_dir / ORDER).write_text(
        json.dumps([[j.job_id, known.get(j.job_id, median), j.job_id in known] for j in ordered])
    )
    return ordered
