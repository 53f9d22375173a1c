#!/usr/bin/env python
"""makespan: how close a fleet comes to the ideal schedule, and per-job dispatch overhead.

Runs the ct-fleet CLI on the embedded cloud (through bench/_probe.py, which only observes
the controller's SQS calls) with command jobs of known durations: a deterministic mix from
0.2 s to 5 s keyed on (sample id, epoch), `sleep`, then copying a pre-generated one-sample
.eval to $CT_OUTPUT. K workers x C slots (default 2 x 4).

    makespan = last done message's finished_at - first work message sent
    ideal    = max(sum of durations / (K*C), longest job)
    target   : makespan / ideal <= 1.15 for 200 jobs

Per-job dispatch overhead = in-job overhead (finished_at - received_at - sleep: head,
runner start, bash, upload) + slot gap (previous job in the same slot finished -> this
job received: done report, delete, receive). Run at two queue depths (200 and 1,000 jobs
queued at once) because moto's SQS calls slow down linearly with queue depth.

    .venv/bin/python bench/makespan.py             # 200 and 1,000 jobs, 2 workers x 4 slots
    .venv/bin/python bench/makespan.py --quick     # 40 and 120 jobs
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import _common as c
from rich.console import Console
from rich.table import Table

TARGET = 1.15


def duration(sample_id: str, epoch: int) -> float:
    """Deterministic, spread evenly over 0.2-5.0 s (0.1 s steps)."""
    h = int(hashlib.sha256(f"{sample_id}/{epoch}".encode()).hexdigest(), 16)
    return round(0.2 + (h % 49) * 0.1, 1)


@dataclass
class Job:
    job_id: str
    instance: str
    received: float
    started: float
    finished: float
    sleep: float
    cmd_start: float = 0.0
    cmd_end: float = 0.0
    gap: float | None = None  # previous job in this slot finished -> this one received


@dataclass
class RunStats:
    jobs: int
    makespan: float
    ideal: float
    startup: float  # first work sent -> first job received
    enqueue: float  # first -> last work message batch sent before the first job ran
    in_job: list[float]
    gaps: list[float]
    parts: dict[str, list[float]]
    depth_rows: list[tuple[str, float, float, int]]
    wall: float
    busy_share: float
    fleet_dir: Path | None = None
    order: list[tuple[str, int]] | None = None  # (sample, epoch) in the order the jobs were received
    sleeps: dict[tuple[str, int], float] | None = None

    @property
    def ratio(self) -> float:
        return self.makespan / self.ideal


def run_fleet(
    n_wanted: int,
    workers: int,
    slots: int,
    tmp: Path,
    console: Console,
    *,
    durations: Callable[[str, int], float] = duration,
    tag: str = "",
    runs_name: str = "",
    extra: Sequence[str] = (),
) -> RunStats:
    """One fleet run; `runs_name` shares a runs/ directory between runs (their history),
    `extra` adds CLI arguments, `tag` names this run's files."""
    tag = tag or str(n_wanted)
    epochs = math.ceil(n_wanted / len(c.SMOKE_IDS))
    pool = tmp / f"pool-{tag}"
    c.make_pool(pool, c.SMOKE_IDS, epochs)
    sleeps = {}
    for sid in c.SMOKE_IDS:
        for epoch in range(1, epochs + 1):
            d = durations(sid, epoch)
            (pool / f"{sid}__{epoch}.dur").write_text(f"{d}\n")
            sleeps[(sid, epoch)] = d
    stamps = tmp / f"stamps-{tag}.txt"
    # $EPOCHREALTIME is a bash builtin: the stamps cost no process.
    command = (
        f's=$EPOCHREALTIME; sleep "$(cat "{pool}/${{CT_SAMPLE_ID}}__${{CT_EPOCH}}.dur")"; '
        f'cp "{pool}/${{CT_SAMPLE_ID}}__${{CT_EPOCH}}.eval" "$CT_OUTPUT"; '
        f'printf "%s %s %s\\n" "$CT_JOB_ID" "$s" "$EPOCHREALTIME" >> "{stamps}"'
    )
    record = tmp / f"probe-{tag}.jsonl"
    runs = tmp / (runs_name or f"runs-{tag}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "CT_FLEET_API_LOG"}
    env["CT_FLEET_RUNS"] = str(runs)
    argv = [
        c.PYTHON,
        str(Path(__file__).with_name("_probe.py")),
        str(record),
        "eval",
        "--task-file",
        "smoke",
        "--policy",
        "honest",
        "--epochs",
        str(epochs),
        # Command jobs run no sandbox: no Docker to ready for them.
        "-T",
        "sandbox=local",
        "--command",
        command,
        "--ec2-arg",
        f"max_workers={workers}",
        "--ec2-arg",
        f"concurrency_per_worker={slots}",
        *extra,
    ]
    t0 = time.monotonic()
    with open(tmp / f"cli-{tag}.log", "w") as out:
        rc = subprocess.run(argv, cwd=c.REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"ct-fleet exited {rc}: see {tmp / f'cli-{tag}.log'}")

    first_send = None
    sends: list[float] = []
    by_job: dict[str, Job] = {}
    fleet = max((p.parent for p in runs.glob("*/manifest.json")), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((fleet / "manifest.json").read_text())
    job_key = {j["job_id"]: (j["sample_id"], j["epoch"]) for j in manifest["jobs"]}
    for line in record.read_text().splitlines():
        ev = json.loads(line)
        if ev["ev"] == "send" and ev["queue"] == "work":
            first_send = ev["t"] if first_send is None else first_send
            sends.append(ev["t"])
        elif ev["ev"] == "done" and ev["msg"]["type"] == "done":
            m = ev["msg"]
            if m["outcome"] in ("success", "sample_error") and m["job_id"] not in by_job:
                by_job[m["job_id"]] = Job(
                    m["job_id"],
                    m["instance_id"],
                    m["received_at"],
                    m["started_at"],
                    m["finished_at"],
                    sleeps[job_key[m["job_id"]]],
                )
    assert first_send is not None, "no work message seen"
    for line in stamps.read_text().splitlines():
        job_id, start, end = line.split()
        if job_id in by_job and not by_job[job_id].cmd_start:
            by_job[job_id].cmd_start, by_job[job_id].cmd_end = float(start), float(end)
    jobs = sorted(by_job.values(), key=lambda j: j.received)
    n = len(job_key)
    if len(jobs) != n:
        raise SystemExit(f"only {len(jobs)} of {n} jobs reported done")

    # Slot gaps: per instance, each job takes the slot that freed earliest.
    for inst in {j.instance for j in jobs}:
        free: list[float] = []
        for j in (j for j in jobs if j.instance == inst):
            if len(free) >= slots:
                j.gap = max(0.0, j.received - heapq.heappop(free))
            heapq.heappush(free, j.finished)

    total_sleep = sum(sleeps[k] for k in job_key.values())
    ideal = max(total_sleep / (workers * slots), max(sleeps.values()))
    makespan = max(j.finished for j in jobs) - first_send
    in_job = [j.finished - j.received - j.sleep for j in jobs]
    gaps = [j.gap for j in jobs if j.gap is not None]
    # Overhead by queue depth at dispatch (messages still queued when the job was received).
    rows = []
    quarters = [(n * k // 4, n * (k + 1) // 4) for k in range(4)]
    for lo, hi in quarters:
        part = jobs[lo:hi]
        g = [j.gap for j in part if j.gap is not None]
        rows.append(
            (
                f"{n - hi}-{n - lo}",
                statistics.mean(j.finished - j.received - j.sleep for j in part),
                statistics.mean(g) if g else float("nan"),
                len(part),
            )
        )
    busy = sum(j.finished - j.received for j in jobs)
    parts = {
        "HeadObject (received -> started)": [j.started - j.received for j in jobs],
        "runner + bash start (started -> command start)": [j.cmd_start - j.started for j in jobs],
        "command beyond its sleep (cat, sleep, cp)": [j.cmd_end - j.cmd_start - j.sleep for j in jobs],
        "runner exit, header check, PutObject (-> finished)": [j.finished - j.cmd_end for j in jobs],
        "slot gap (done report, delete, poll, receive)": gaps,
    }
    return RunStats(
        jobs=n,
        makespan=makespan,
        ideal=ideal,
        startup=jobs[0].received - first_send,
        enqueue=max(t for t in sends if t <= jobs[0].received) - first_send,
        in_job=in_job,
        gaps=gaps,
        parts=parts,
        depth_rows=rows,
        wall=wall,
        busy_share=busy / (makespan * workers * slots),
        fleet_dir=fleet,
        order=[job_key[j.job_id] for j in sorted(jobs, key=lambda j: j.received)],
        sleeps=sleeps,
    )


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200,1000", help="jobs per run, comma separated (the first is the target run)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="40 and 120 jobs")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sizes = [40, 120] if args.quick else [int(s) for s in args.sizes.split(",")]
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("makespan")
    stats = []
    for n in sizes:
        console.print(f"[dim]running {n} jobs on {args.workers} workers x {args.slots} slots ...[/]")
        stats.append(run_fleet(n, args.workers, args.slots, tmp, console))

    table = Table(title=f"makespan: {args.workers} workers x {args.slots} slots, sleeps 0.2-5.0 s")
    for col in (
        "jobs",
        "ideal s",
        "makespan s",
        "ratio",
        "enqueue s",
        "startup s",
        "busy %",
        "in-job overhead mean/p95 s",
        "slot gap mean/p95 s",
        "dispatch overhead / job s",
        "CLI wall s",
    ):
        table.add_column(col, justify="right")
    for s in stats:
        table.add_row(
            str(s.jobs),
            f"{s.ideal:.1f}",
            f"{s.makespan:.1f}",
            f"{s.ratio:.3f}",
            f"{s.enqueue:.1f}",
            f"{s.startup:.1f}",
            f"{100 * s.busy_share:.0f}",
            f"{statistics.mean(s.in_job):.3f} / {pct(s.in_job, 0.95):.3f}",
            f"{statistics.mean(s.gaps):.3f} / {pct(s.gaps, 0.95):.3f}",
            f"{statistics.mean(s.in_job) + statistics.mean(s.gaps):.3f}",
            f"{s.wall:.0f}",
        )
    console.print(table)
    breakdown = Table(title="where the per-job dispatch overhead goes (mean / p95 ms)")
    breakdown.add_column("component")
    for s in stats:
        breakdown.add_column(f"{s.jobs} jobs", justify="right")
    for name in stats[0].parts:
        breakdown.add_row(
            name,
            *(f"{1000 * statistics.mean(s.parts[name]):.0f} / {1000 * pct(s.parts[name], 0.95):.0f}" for s in stats),
        )
    console.print(breakdown)
    depth = Table(title="dispatch overhead by queue depth (jobs still queued when received)")
    for col in ("run", "queued", "in-job overhead mean s", "slot gap mean s", "jobs"):
        depth.add_column(col, justify="right")
    for s in stats:
        for label, ov, gap, count in s.depth_rows:
            depth.add_row(str(s.jobs), label, f"{ov:.3f}", f"{gap:.3f}", str(count))
    console.print(depth)
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    first = stats[0]
    parts = [
        f"{s.jobs} jobs: makespan/ideal {s.ratio:.3f} ({s.makespan:.1f}s / {s.ideal:.1f}s), "
        f"overhead {statistics.mean(s.in_job) + statistics.mean(s.gaps):.3f}s/job"
        for s in stats
    ]
    print(
        f"makespan: {args.workers}x{args.slots} slots; "
        + "; ".join(parts)
        + f" (target <= {TARGET} at {first.jobs}: {'MET' if first.ratio <= TARGET else 'MISSED'})"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if first.ratio <= TARGET else 3


if __name__ == "__main__":
    sys.exit(main())
