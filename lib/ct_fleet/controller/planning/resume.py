"""Resuming a fleet by its id (resume=<fleet id>): the way back to a new_fleet=true fleet.

A fleet's id is normally a pure function of the command, so rerunning the command resumes
it. A new_fleet=true fleet has a fresh id that no command reproduces; resume=<id> names it,
and the rest of the command must still describe the same fleet (same jobs, same code).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ...errors import BadInput
from ...protocol import Manifest, run_layout


def check_resume(run_dir: Path, job_ids: Iterable[str], code_sha: str) -> None:
    fleet_id = run_dir.name
    path = run_dir / run_layout.MANIFEST
    if not path.is_file():
        raise BadInput(
            f"resume={fleet_id}: no fleet {fleet_id} under {run_dir.parent} (resume from the machine that started it)"
        )
    try:
        manifest = Manifest.from_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise BadInput(f"resume={fleet_id}: its manifest {path} is unreadable ({exc})") from None
    if manifest.fleet_id != fleet_id:
        raise BadInput(f"resume={fleet_id}: {path} belongs to fleet {manifest.fleet_id}")
    if manifest.code_sha != code_sha:
        raise BadInput(
            f"resume={fleet_id}: the fleet ran code {manifest.code_sha[:12]}, this checkout is {code_sha[:12]}; "
            "check out that code to resume it"
        )
    if {j.job_id for j in manifest.jobs} != set(job_ids):
        raise BadInput(
            f"resume={fleet_id}: this command makes other jobs than the fleet has; repeat its task file, "
            "policy and epochs"
        )
