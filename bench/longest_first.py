#!/usr/bin/env python
"""longest_first: makespan over ideal on heavy-tailed jobs, without history and with it.

Command jobs of known durations (bench/makespan.py's fleet, its probe and its pool of
pre-built results): lognormal around a median of M seconds (sigma 0.5), and one job in
twenty 10x the median, a deterministic function of (sample, epoch). Two runs in one runs/
directory: the first has no history, so its jobs go in plan order (what main does); the
second is a new fleet of the same tasks (`--ec2-arg new_fleet=true`), whose queue the
first run's durations order longest first (controller/planning/history.py).

    makespan = last job finished - first work message sent
    ideal    = max(total work / slots, longest job)
    target   : makespan / ideal <= 1.10 with history
    also     : slot-hours over sample-hours of each run (workers.jsonl's launched -> ended
               times the slots, against the jobs' received -> finished)

    .venv/bin/python bench/longest_first.py            # 160 jobs, median 4 s, 2 workers x 4 slots
    .venv/bin/python bench/longest_first.py --quick    # 80 jobs, median 2 s
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
from pathlib import Path

import _common as c
from makespan import RunStats, run_fleet
from rich.console import Console
from rich.table import Table

TARGET = 1.10


def heavy_tail(median: float):
    normal = statistics.NormalDist(0.0, 0.5)

    def durations(sample_id: str, epoch: int) -> float:
        h = int(hashlib.sha256(f"tail/{sample_id}/{epoch}".encode()).hexdigest(), 16)
        if h % 20 == 0:
            return round(10 * median, 1)
        u = ((h >> 8) % 10_000 + 0.5) / 10_000
        return round(max(0.2, median * 2.718281828 ** normal.inv_cdf(u)), 1)

    return durations


def instance_seconds(fleet_dir: Path) -> float:
    launched: dict[str, float] = {}
    ended: dict[str, float] = {}
    for line in (fleet_dir / "workers.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "launched":
            launched.setdefault(e["instance_id"], e["at"])
        elif e["event"] == "ended":
            ended.setdefault(e["instance_id"], e["at"])
    return sum(ended.get(i, at) - at for i, at in launched.items())


def rank_correlation(a: list[float], b: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    return statistics.correlation(ranks(a), ranks(b))


def tail_start(s: RunStats, long_at: float) -> float:
    """The last position (0-1) in the dispatch order at which a long job started."""
    assert s.order and s.sleeps
    positions = [i for i, key in enumerate(s.order) if s.sleeps[key] >= long_at]
    return max(positions) / max(1, len(s.order) - 1) if positions else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=160)
    ap.add_argument("--median", type=float, default=4.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="80 jobs, median 2 s")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    jobs, median = (80, 2.0) if args.quick else (args.jobs, args.median)
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("longest-first")
    durations = heavy_tail(median)
    runs = []
    for tag, extra in (("plan-order", ()), ("history", ("--ec2-arg", "new_fleet=true"))):
        console.print(f"[dim]{tag}: {jobs} jobs on {args.workers} workers x {args.slots} slots ...[/]")
        runs.append(
            run_fleet(
                jobs,
                args.workers,
                args.slots,
                tmp,
                console,
                durations=durations,
                tag=tag,
                runs_name="runs",
                extra=extra,
            )
        )
    table = Table(title=f"longest first: {jobs} jobs, lognormal around {median} s, 1 in 20 at {10 * median} s")
    for col in ("run", "ideal s", "makespan s", "ratio", "last long job starts at", "slot-h / sample-h", "busy %"):
        table.add_column(col, justify="right")
    ratios = []
    for tag, s in zip(("plan order (no history)", "longest first (history)"), runs, strict=True):
        assert s.fleet_dir is not None
        sample = s.busy_share * s.makespan * args.workers * args.slots
        ratios.append(instance_seconds(s.fleet_dir) * args.slots / sample)
        table.add_row(
            tag,
            f"{s.ideal:.1f}",
            f"{s.makespan:.1f}",
            f"{s.ratio:.3f}",
            f"{100 * tail_start(s, 10 * median):.0f}% of the jobs",
            f"{ratios[-1]:.2f}",
            f"{100 * s.busy_share:.0f}",
        )
    console.print(table)
    with_history = runs[1]
    assert with_history.fleet_dir is not None and with_history.sleeps is not None
    predicted = json.loads((with_history.fleet_dir / "order.json").read_text())
    manifest = json.loads((with_history.fleet_dir / "manifest.json").read_text())
    key = {j["job_id"]: (j["sample_id"], j["epoch"]) for j in manifest["jobs"]}
    rho = rank_correlation([row[1] for row in predicted], [with_history.sleeps[key[row[0]]] for row in predicted])
    console.print(f"predicted against actual durations (order.json): rank correlation {rho:.3f}")
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    met = with_history.ratio <= TARGET
    print(
        f"longest_first: {jobs} jobs, {args.workers}x{args.slots} slots; makespan/ideal plan order "
        f"{runs[0].ratio:.3f}, with history {with_history.ratio:.3f} (target <= {TARGET}: "
        f"{'MET' if met else 'MISSED'}); slot-h/sample-h {ratios[0]:.2f} -> {ratios[1]:.2f}"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main())
