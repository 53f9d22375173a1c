"""Mid-run, what `inspect view` shows of a fleet: the merged log of the samples so far.

A real run whose first jobs finish while the others wait at a gate (tests.testkit.fault_policies:
gated), so the results so far stay put while the test looks. It looks as `inspect view`
does, through Inspect's public log API on the directory `ct-fleet view` points it at
(runs/<fleet>/merged): the listing (list_eval_logs, what the viewer's log list shows),
each log's header (read_eval_log header_only, the viewer's status and counts) and its
sample summaries (read_eval_log_sample_summaries, the viewer's sample list).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from inspect_ai.log import list_eval_logs, read_eval_log, read_eval_log_sample_summaries

from ct_fleet.protocol import Manifest, run_layout
from testkit.fleet import (
    FAST,
    LOCAL,
    ONE_WORKER,
    assert_nothing_running,
    env_for,
    finish,
    run_cli,
    start,
    wait_for,
)

FREE = 3  # jobs that finish before the gate opens: the results so far
ARGS = [
    "--task-file",
    "smoke",
    "--epochs",
    "2",
    "--policy",
    "tests.testkit.fault_policies:gated",
    "--ec2-arg",
    "live_merge_interval=1",
    *FAST,
    *ONE_WORKER,
    *LOCAL,
]


def _pairs_of_results(run_dir: Path) -> list[tuple[str, int]]:
    """(sample id, epoch) of each result the controller holds (jobs/<job_id>.evaljob)."""
    manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())
    jobs = [manifest.job(path.stem) for path in run_layout.job_logs(run_dir)]
    return sorted((str(job.sample_id), job.epoch) for job in jobs if job is not None)


def _live_merges(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / run_layout.LIVE_MERGES
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _live_samples(run_dir: Path) -> int:
    """Samples in the latest live merge that succeeded (0 before the first)."""
    return max((int(m["samples"]) for m in _live_merges(run_dir) if "samples" in m), default=0)


def _as_the_viewer_sees(log_dir: Path) -> tuple[str, int, list[tuple[str, int]]]:
    """(status, completed samples in the header, (id, epoch) of the sample list) of the one
    log Inspect lists in log_dir."""
    (info,) = list_eval_logs(str(log_dir))
    assert info.task == "toyarena"
    header = read_eval_log(info, header_only=True)
    completed = header.results.completed_samples if header.results else 0
    summaries = read_eval_log_sample_summaries(info)
    return header.status, completed, sorted((str(s.id), s.epoch) for s in summaries)


@pytest.mark.e2e
def test_inspect_view_lists_the_partial_merged_log_with_the_samples_so_far(tmp_path: Path) -> None:
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    proc = start(runs, *ARGS, CT_FAULT_FREE=str(FREE), CT_FAULT_GATE=str(gate))
    try:
        run_dir = wait_for(lambda: next((p.parent for p in runs.glob("*/manifest.json")), None), timeout=300)
        # The gate holds every other job: no result comes after these until it opens.
        wait_for(lambda: _live_samples(run_dir) >= FREE, timeout=300)
        so_far = _pairs_of_results(run_dir)
        status, completed, listed = _as_the_viewer_sees(run_dir / run_layout.MERGED)
        # `ct-fleet view` mid-run, with a result newer than merged/ (one that arrived after
        # the last live merge): its own merge shows the run as running too.
        newest = max(run_layout.job_logs(run_dir), key=lambda p: p.stat().st_mtime)
        os.utime(newest)
        viewed = run_cli(["view", run_dir.name, "--no-serve"], env=env_for(runs), timeout=300)
        status_in_view = _as_the_viewer_sees(run_dir / run_layout.MERGED)[0]
        running = proc.poll() is None
    finally:
        gate.touch()
        code, out, err = finish(proc)
    assert running and len(so_far) == FREE
    assert status == "started"  # the viewer shows the run as running
    assert viewed.returncode == 0, viewed.stdout + viewed.stderr
    assert status_in_view == "started", viewed.stdout + viewed.stderr
    assert listed == so_far and completed == FREE
    # Each live merge had results to show: none spent its time (and the wait after it,
    # ten times as long) merging nothing before the first result came.
    assert [m for m in _live_merges(run_dir) if m.get("samples") == 0] == []
    assert code == 0, out + err
    status, completed, listed = _as_the_viewer_sees(run_dir / run_layout.MERGED)
    assert status == "success" and completed == 8 and listed == _pairs_of_results(run_dir)
    assert_nothing_running(runs)
