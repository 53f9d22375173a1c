"""`ct-fleet view FLEET`: a fleet's merged runs in Inspect's log viewer."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ..controller.reporting import checked_fleet_id, controller_here, fetch_results, is_local_fleet, remote_controller
from ..errors import BadInput
from ..paths import runs_dir
from ..protocol import Manifest, run_layout
from .console import console, err
from .fleet_cmds import aws_cloud, bucket_option, region_option


@click.command(name="view")
@click.argument("fleet_id", callback=lambda ctx, param, value: checked_fleet_id(value))
@click.option("--host", default="127.0.0.1", show_default=True, help="address `inspect view` listens on")
@click.option("--port", default=7575, show_default=True, type=click.IntRange(1, 65535), help="its port")
@click.option("--no-serve", is_flag=True, help="fetch and merge only; print the merged logs' paths")
@region_option
@bucket_option
def view_command(fleet_id: str, host: str, port: int, no_serve: bool, region: str | None, bucket: str) -> None:
    """Open a fleet's merged runs in `inspect view`, during its run or after it.

    Reads runs/FLEET_ID/. A fleet that ran from another machine (or whose results here are
    incomplete) first has its manifest and results fetched from S3. The results so far are
    merged when merged/ is missing or older than them, so a fleet still running shows the
    samples finished so far.
    """
    run_dir = runs_dir(os.environ) / fleet_id
    if is_local_fleet(run_dir):
        manifest_path = run_dir / run_layout.MANIFEST
        manifest = Manifest.from_json(manifest_path.read_text())
        count = len(run_layout.job_logs(run_dir))
        live = controller_here(run_dir)
    else:
        s3 = aws_cloud(region).client("s3")
        live = remote_controller(s3, bucket, fleet_id)  # asked first: a run that ends meanwhile is fetched whole
        manifest, count = fetch_results(s3, bucket, fleet_id, run_dir)
    if not count:
        raise BadInput(f"fleet {fleet_id} has no results yet: try again once a job has finished")
    merged_dir = run_dir / run_layout.MERGED
    if _stale(merged_dir, run_dir):
        from ..controller.fleet import merge_fleet

        # While its controller runs (here, or elsewhere for an EC2 fleet), a merge of the
        # results so far is "started", as the run's own live merges write it, never a
        # finished run that failed (which the viewer would show until the next live merge).
        merge_fleet(
            manifest,
            run_dir,
            on_skip=lambda path, why: err.print(f"left out {path.name}: {why}"),
            live=live,
        )
    logs = sorted(merged_dir.glob("*.eval"))
    if no_serve:
        for path in logs:
            console.print(str(path), highlight=False, soft_wrap=True)
        return
    inspect = str(Path(sys.executable).parent / "inspect")
    console.print(f"inspect view of {len(logs)} merged run(s) at http://{host}:{port}", highlight=False)
    os.execv(inspect, [inspect, "view", "start", "--log-dir", str(merged_dir), "--host", host, "--port", str(port)])


def _stale(merged_dir: Path, run_dir: Path) -> bool:
    """True when merged/ lacks a log or a result is newer than the oldest merged log."""
    logs = list(merged_dir.glob("*.eval"))
    results = run_layout.job_logs(run_dir)
    if not logs:
        return True
    oldest = min(p.stat().st_mtime for p in logs)
    return any(p.stat().st_mtime > oldest for p in results)
