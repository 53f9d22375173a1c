#!/usr/bin/env python
"""job_overhead: what a worker spends on a job beyond the sample's own work, per runner.

Runs the ct-fleet CLI on the embedded cloud twice with the same real Inspect jobs (the
toyarena `smoke` samples, honest policy, E epochs), 2 workers x 2 slots: once with the
per-process runner (`--ec2-arg warm_runner=false`: a fresh interpreter per job, the
runner before issue 14) and once with the warm runner (the default).

    per-job overhead = worker time (done report: received_at -> finished_at)
                       - the sample's own total_time (from its result log)
    targets (warm runner): median <= 0.15 s; p95 <= 0.5 s after each slot's first job;
    a slot's first job <= 3 s

The first job of each slot also pays the worker's start (the warm runner's server
importing inspect_ai): the table shows all jobs and the jobs after each slot's first.

    .venv/bin/python bench/job_overhead.py            # 15 epochs: 60 jobs per runner
    .venv/bin/python bench/job_overhead.py --quick    # 5 epochs: 20 jobs per runner
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections import defaultdict

import _common as c
import _fleet as f
from rich.console import Console
from rich.table import Table

# Issue 22's targets for the warm runner: the median job, the p95 of the jobs after each
# slot's first, and the first job of a slot (which waits for the runner's server).
TARGET_MEDIAN, TARGET_P95, TARGET_FIRST = 0.15, 0.5, 3.0


def later_jobs(jobs: list[f.Job], slots: int) -> list[f.Job]:
    """Jobs after the first `slots` of each worker (those pay the worker's start)."""
    by_worker: dict[str, list[f.Job]] = defaultdict(list)
    for job in jobs:
        by_worker[job.instance].append(job)
    return [j for js in by_worker.values() for j in sorted(js, key=lambda j: j.received)[slots:]]


def overheads(jobs: list[f.Job]) -> list[float]:
    return [j.worker_time - (j.total_time or 0.0) for j in jobs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="5 epochs")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    epochs = 5 if args.quick else args.epochs
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("job-overhead")
    base = [
        "--task-file",
        "smoke",
        "--policy",
        "honest",
        "--epochs",
        str(epochs),
        # The fleet's overhead, not Docker's (bench/sandbox.py): Inspect's local sandbox.
        "-T",
        "sandbox=local",
        "--ec2-arg",
        f"max_workers={args.workers}",
        "--ec2-arg",
        f"concurrency_per_worker={args.slots}",
    ]
    runs = {}
    for name, extra in (("per-process", ["--ec2-arg", "warm_runner=false"]), ("warm", [])):
        console.print(f"[dim]{name} runner: {4 * epochs} jobs on {args.workers} workers x {args.slots} slots ...[/]")
        runs[name] = f.run_fleet(name, base + extra, tmp)

    table = Table(title=f"per-job overhead, {args.workers} workers x {args.slots} slots (seconds)")
    for col in (
        "runner",
        "jobs",
        "sample total_time median",
        "worker time median",
        "overhead median",
        "overhead p95",
        "after each slot's first: median / p95",
        "first job per slot: median",
        "CLI wall",
    ):
        table.add_column(col, justify="right")
    stats = {}
    for name, run in runs.items():
        all_ov = overheads(run.jobs)
        later = overheads(later_jobs(run.jobs, args.slots))
        later_ids = {j.job_id for j in later_jobs(run.jobs, args.slots)}
        first = overheads([j for j in run.jobs if j.job_id not in later_ids])
        stats[name] = (f.median(all_ov), f.pct(all_ov, 0.95), f.pct(later, 0.95), f.median(first))
        table.add_row(
            name,
            str(len(run.jobs)),
            f"{f.median([j.total_time or 0.0 for j in run.jobs]):.3f}",
            f"{f.median([j.worker_time for j in run.jobs]):.3f}",
            f"{f.median(all_ov):.3f}",
            f"{f.pct(all_ov, 0.95):.3f}",
            f"{f.median(later):.3f} / {f.pct(later, 0.95):.3f}",
            f"{f.median(first):.3f}",
            f"{run.wall:.1f}",
        )
    console.print(table)
    parts = Table(title="where a warm job's time goes (median / p95 ms, jobs after each slot's first)")
    parts.add_column("part")
    for name in runs:
        parts.add_column(name, justify="right")
    rows = {
        "duplicate check (received -> started)": lambda j: j.started - j.received,
        "runner and upload beyond the sample (started -> finished - total_time)": lambda j: (
            j.finished - j.started - (j.total_time or 0.0)
        ),
        "the sample itself (total_time)": lambda j: j.total_time or 0.0,
    }
    for label, fn in rows.items():
        cells = []
        for run in runs.values():
            values = [fn(j) for j in later_jobs(run.jobs, args.slots)]
            cells.append(f"{1000 * f.median(values):.0f} / {1000 * f.pct(values, 0.95):.0f}")
        parts.add_row(label, *cells)
    console.print(parts)
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    warm_median, warm_p95, warm_later_p95, warm_first = stats["warm"]
    cold_median, cold_p95, _, _ = stats["per-process"]
    verdicts = [
        f"median {warm_median:.3f} <= {TARGET_MEDIAN}: {'MET' if warm_median <= TARGET_MEDIAN else 'MISSED'}",
        f"p95 after the first {warm_later_p95:.3f} <= {TARGET_P95}: {'MET' if warm_later_p95 <= TARGET_P95 else 'MISSED'}",
        f"first job {warm_first:.3f} <= {TARGET_FIRST}: {'MET' if warm_first <= TARGET_FIRST else 'MISSED'}",
    ]
    met = warm_median <= TARGET_MEDIAN and warm_later_p95 <= TARGET_P95 and warm_first <= TARGET_FIRST
    print(
        f"job_overhead: {args.workers}x{args.slots} slots, {4 * epochs} jobs each; per-job overhead median / p95: "
        f"per-process {cold_median:.3f} / {cold_p95:.3f} s, warm {warm_median:.3f} / {warm_p95:.3f} s "
        f"({cold_median / warm_median:.1f}x less); warm targets: {'; '.join(verdicts)}"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main())
