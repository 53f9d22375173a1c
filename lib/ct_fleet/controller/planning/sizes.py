"""Sizes a fleet's records must stay within, checked on the plan before anything exists.

A work message is refused by SQS past its MaximumMessageSize, and the manifest is
written to S3 and to disk and read back by every resume: both are measured here, so that
arguments too large for them stop the run before a queue or bucket is touched.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ...errors import BadInput
from ...protocol import Manifest, ManifestJob
from ...protocol.messages import MAX_MESSAGE_BYTES

MAX_MANIFEST_BYTES = 64 << 20
# What a sample id costs in the manifest besides its JSON: a job entry (its id, task key,
# epoch, keys and indent) per epoch, and a line of the task's id list. Errs large.
JOB_ENTRY_BYTES = 160
ID_LINE_BYTES = 8


def check_sizes(manifest: Manifest) -> None:
    """One line when a job's work message or the manifest would be too large."""
    for task in manifest.tasks:
        if not task.sample_ids:
            continue
        # Within a task only the sample id and the job id change a message's size.
        longest = max(task.sample_ids, key=lambda s: len(json.dumps(s)))
        job = ManifestJob(job_id="0" * 16, task=task.key, sample_id=longest, epoch=manifest.epochs)
        size = len(manifest.work_message(job).to_json().encode())
        if size > MAX_MESSAGE_BYTES:
            raise BadInput(
                f"task {task.name}: one job's work message would be {size:,} bytes, over SQS's "
                f"{MAX_MESSAGE_BYTES:,}-byte limit: shorten the -T/-M arguments (have the task read big inputs from a file)"
            )
    size = manifest_bytes(manifest)
    if size > MAX_MANIFEST_BYTES:
        raise BadInput(
            f"the fleet's manifest would be about {size:,} bytes, over the {MAX_MANIFEST_BYTES:,}-byte limit: "
            "shorten the -T/-M arguments or split the run"
        )


def manifest_bytes(manifest: Manifest) -> int:
    """About what the manifest's JSON weighs, erring large. Serialising 200,000 jobs takes
    seconds: it is measured without its jobs and id lists, which are counted from the ids'
    JSON, a job per sample and epoch of each task (its own epochs where it has them)."""
    bare = replace(manifest, jobs=[], tasks=[replace(t, sample_ids=[]) for t in manifest.tasks])
    size = len(bare.to_json().encode())
    for task in manifest.tasks:
        epochs = manifest.epochs_of(task)
        ids = len(json.dumps(task.sample_ids).encode()) + ID_LINE_BYTES * len(task.sample_ids)
        size += ids * (1 + epochs) + JOB_ENTRY_BYTES * len(task.sample_ids) * epochs
    return size
