"""The images each job's sandboxes ran, as its worker reported them (DoneMessage.extra).

Appended to runs/<fleet_id>/sandbox-images.jsonl, one line per report that names images:
{"job_id", "sample_id", "epoch", "instance_id", "images": [{"ref", "id", "repo_digests"}]}.
With the code sha in the manifest this pins what a run ran, to reproduce it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...protocol import DoneMessage, run_layout


def record(run_dir: Path, report: DoneMessage, sample_id: str | int, epoch: int) -> None:
    images = report.extra.get("images") if report.type == "done" else None
    if not images:
        return
    line = {
        "job_id": report.job_id,
        "sample_id": sample_id,
        "epoch": epoch,
        "instance_id": report.instance_id,
        "outcome": report.outcome,
        "images": images,
    }
    with open(run_dir / run_layout.SANDBOX_IMAGES, "a", encoding="utf-8") as out:
        out.write(json.dumps(line, separators=(",", ":")) + "\n")


def read(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / run_layout.SANDBOX_IMAGES
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
