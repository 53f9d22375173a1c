#!/usr/bin/env python
"""fleet_vs_inspect: a whole `ct-fleet eval` against one `inspect eval` of the same samples.

Two pairs, each run back to back in this one run (the ratio is the target):

- the bench task: the toyarena `medium` task set (27 samples) x 8 epochs = 216 samples,
  policy bench.sleep_policy:sleep_then_honest (2 s of `sleep` in the sample's sandbox,
  then the honest policy's scripts), on the embedded cloud at 2 workers x 4 slots,
  against `inspect eval --max-samples 8`. Target (issue 22): fleet / inspect <= 1.10.
- the smoke run: `ct-fleet eval --task-file smoke --policy honest --epochs 3` (12 jobs,
  the embedded cloud's defaults: 2 workers x 2 slots) against `inspect eval
  --max-samples 4` of the same 12 samples. Target (issue 22): fleet / inspect <= 2.0.

The sandbox is Inspect's `local` one (`-T sandbox=local` on both sides; bench/sandbox.py
measures what toyarena's default Docker sandbox adds per sample). Both sides import the same task file with the same
PYTHONPATH. The fleet's fixed costs are timed one by one from bench/_probe.py's phase
records, the workers' logs and their done reports (bench/_fleet.py).

    .venv/bin/python bench/fleet_vs_inspect.py             # both pairs
    .venv/bin/python bench/fleet_vs_inspect.py --quick     # medium x 2 epochs (54 samples), smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common as c
import _fleet as f
from rich.console import Console
from rich.table import Table

BENCH_TARGET = 1.10
SMOKE_TARGET = 2.0
POLICY = "bench.sleep_policy:sleep_then_honest"
LOCAL = ["-T", "sandbox=local"]


def task_set_ids(name: str) -> list[str]:
    path = c.REPO / "examples" / "task_sets" / f"{name}.jsonl"
    ids = []
    for line in path.read_text().splitlines():
        if line.strip():
            t = json.loads(line)
            ids.append(":".join(x for x in (t["env"], t["main_task"], t.get("side_task")) if x))
    return ids


def inspect_eval(ids: list[str], policy: str, epochs: int, max_samples: int, tmp: Path, name: str) -> float:
    """Wall seconds of one `inspect eval` of ids x epochs (the direct run)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(c.REPO / "lib"), str(c.REPO / "examples/settings"), str(c.REPO)]),
    }
    argv = [
        str(c.REPO / ".venv" / "bin" / "inspect"),
        "eval",
        c.TASK_SPEC,
        "-T",
        f"policy={policy}",
        *LOCAL,
        "--model",
        "mockllm/model",
        "--sample-id",
        ",".join(ids),
        "--epochs",
        str(epochs),
        "--max-samples",
        str(max_samples),
        # Inspect's default is one subprocess per core (2 here), which would hold 8 samples'
        # sandbox commands to 2 at a time; a fleet job runs one sample, so it never waits.
        "--max-subprocesses",
        str(max_samples),
        "--log-dir",
        str(tmp / f"inspect-{name}"),
        "--display",
        "none",
    ]
    t0 = time.monotonic()
    with open(tmp / f"inspect-{name}.log", "w") as out:
        subprocess.run(argv, cwd=c.REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="medium x 2 epochs instead of 8")
    ap.add_argument("--only", choices=("bench", "smoke"), help="run one pair")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("fleet-vs-inspect")
    results: dict[str, tuple[float, f.FleetRun, int]] = {}
    epochs = 2 if args.quick else 8

    if args.only in (None, "bench"):
        ids = task_set_ids("medium")
        n = len(ids) * epochs
        console.print(f"[dim]bench task: inspect eval of {n} samples, --max-samples 8 ...[/]")
        direct = inspect_eval(ids, POLICY, epochs, 8, tmp, "bench")
        console.print(f"[dim]bench task: ct-fleet eval of {n} jobs, 2 workers x 4 slots ...[/]")
        fleet = f.run_fleet(
            "bench",
            [
                "--task-file",
                "medium",
                "--policy",
                POLICY,
                "--epochs",
                str(epochs),
                *LOCAL,
                "--ec2-arg",
                "max_workers=2",
                "--ec2-arg",
                "concurrency_per_worker=4",
            ],
            tmp,
        )
        results["bench"] = (direct, fleet, n)
    if args.only in (None, "smoke"):
        ids = c.SMOKE_IDS
        console.print("[dim]smoke: inspect eval of 12 samples, --max-samples 4 ...[/]")
        direct = inspect_eval(ids, "honest", 3, 4, tmp, "smoke")
        console.print("[dim]smoke: ct-fleet eval --task-file smoke --policy honest --epochs 3 ...[/]")
        fleet = f.run_fleet("smoke", ["--task-file", "smoke", "--policy", "honest", "--epochs", "3", *LOCAL], tmp)
        results["smoke"] = (direct, fleet, 12)

    table = Table(title="a whole fleet run against one inspect eval of the same samples (seconds)")
    for col in ("run", "samples", "inspect eval", "ct-fleet eval", "ratio", "target", "jobs' span", "job median"):
        table.add_column(col, justify="right")
    targets = {"bench": BENCH_TARGET, "smoke": SMOKE_TARGET}
    verdicts = {}
    for name, (direct, fleet, n) in results.items():
        ratio = fleet.wall / direct
        verdicts[name] = ratio <= targets[name]
        span = max(j.finished for j in fleet.jobs) - min(j.received for j in fleet.jobs)
        table.add_row(
            name,
            str(n),
            f"{direct:.1f}",
            f"{fleet.wall:.1f}",
            f"{ratio:.2f}",
            f"<= {targets[name]}",
            f"{span:.1f}",
            f"{f.median([j.worker_time for j in fleet.jobs]):.2f}",
        )
    console.print(table)
    costs = Table(title="the fleet's fixed costs, one by one (seconds)")
    costs.add_column("part")
    for name in results:
        costs.add_column(name, justify="right")
    rows = {name: f.fixed_costs(fleet) for name, (_, fleet, _) in results.items()}
    first = next(iter(rows.values()))
    for i, (label, _) in enumerate(first):
        costs.add_row(label, *(f"{rows[name][i][1]:.1f}" for name in results))
    console.print(costs)
    console.print(f"[dim]{c.machine()}; local sandbox; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    mark = {True: "MET", False: "MISSED"}
    parts = []
    for name, (direct, fleet, n) in results.items():
        parts.append(
            f"{name} ({n} samples) fleet {fleet.wall:.1f}s / inspect {direct:.1f}s = {fleet.wall / direct:.2f} "
            f"(target <= {targets[name]}: {mark[verdicts[name]]})"
        )
    print("fleet_vs_inspect: " + "; ".join(parts))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(verdicts.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
