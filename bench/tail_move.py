#!/usr/bin/env python
"""tail_move: would moving the last jobs of nearly idle workers onto fewer workers pay?

A model, not a fleet run (issue 38, item 4, with the checkpoints of the long-sample issue):
jobs whose durations are lognormal (sigma 0.5) with one in twenty ten times the median (as
bench/longest_first.py makes them) run on W workers of K slots from one queue, in plan
order or longest first (the order history gives). A worker leaves when its last job ends
(the queue's-tail marker). With the move: once nothing is queued, whenever a job ends, the
worker with the fewest jobs in flight hands them to free slots of the others and leaves, if
that saves instance time. A moved job loses the work since its last checkpoint (half the
checkpoint interval, on average) and pays a restore on its new worker.

    instance time = the sum of each worker's launch to its last job's end
    ideal         = total work / slots (no slot ever idle)

    .venv/bin/python bench/tail_move.py                        # 20 workers x 20 slots, median 600 s
    .venv/bin/python bench/tail_move.py --workers 2 --slots 4 --median 4 --jobs 160 --restore 2 --interval 4
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics


def durations(n: int, median: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * math.exp(rng.gauss(0, 0.5)) * (10 if rng.random() < 0.05 else 1) for _ in range(n)]


def schedule(jobs: list[float], workers: int, slots: int) -> tuple[list[list[float]], float]:
    """Each worker's jobs' end times, and when the queue emptied (the last job's start)."""
    ends: list[list[float]] = [[] for _ in range(workers)]
    free = [(0.0, w) for w in range(workers) for _ in range(slots)]
    heapq.heapify(free)
    last_start = 0.0
    for d in jobs:
        at, w = heapq.heappop(free)
        last_start = at
        ends[w].append(at + d)
        heapq.heappush(free, (at + d, w))
    return ends, last_start


def with_moves(ends: list[list[float]], empty_at: float, slots: int, cost: float) -> tuple[list[float], int]:
    """Each worker's leaving time, moving greedily after the queue emptied; jobs moved."""
    ends = [list(e) for e in ends]
    left: dict[int, float] = {}
    moved = 0
    times = sorted({e for es in ends for e in es if e > empty_at})
    for t in [empty_at, *times]:
        up = [w for w in range(len(ends)) if w not in left and max(ends[w]) > t]
        up.sort(key=lambda w: sum(1 for e in ends[w] if e > t))
        for w in up:
            mine = sorted((e for e in ends[w] if e > t), reverse=True)
            room = [o for o in up if o != w and o not in left for _ in range(slots - sum(1 for e in ends[o] if e > t))]
            if not mine or len(room) < len(mine):
                continue
            # the instance time the worker saves against what the receivers stay up longer
            grown: dict[int, float] = {}
            for e, o in zip(mine, room, strict=False):
                grown[o] = max(grown.get(o, 0.0), e + cost)
            extra = sum(max(0.0, g - max(ends[o])) for o, g in grown.items())
            if max(mine) - t <= extra:
                continue
            for e, o in zip(mine, room, strict=False):
                ends[o].append(e + cost)
            ends[w] = [e for e in ends[w] if e <= t] + [t]
            left[w] = t
            moved += len(mine)
            break
    return [max(e) for e in ends], moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--slots", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--median", type=float, default=600.0, help="a job's median seconds")
    ap.add_argument("--restore", type=float, default=60.0, help="seconds to start a job again from a checkpoint")
    ap.add_argument("--interval", type=float, default=300.0, help="seconds between a job's checkpoints")
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    cost = args.restore + args.interval / 2
    print(
        f"{args.workers} workers x {args.slots} slots, {args.jobs} jobs of median {args.median:g} s "
        f"(a twentieth 10x), a move costs {cost:g} s of the job; mean of {args.seeds} draws"
    )
    for order in ("plan order", "longest first"):
        rows = []
        for seed in range(args.seeds):
            jobs = durations(args.jobs, args.median, seed)
            if order == "longest first":
                jobs.sort(reverse=True)
            ideal = sum(jobs) / (args.workers * args.slots)
            ends, empty_at = schedule(jobs, args.workers, args.slots)
            base = sum(max(e) for e in ends)
            after, moved = with_moves(ends, empty_at, args.slots, cost)
            rows.append(
                (base / (ideal * args.workers), sum(after) / (ideal * args.workers), 1 - sum(after) / base, moved)
            )
        print(
            f"  {order:13s}: instance time / ideal {statistics.mean(r[0] for r in rows):.3f}, "
            f"with the move {statistics.mean(r[1] for r in rows):.3f} "
            f"(saves {100 * statistics.mean(r[2] for r in rows):.1f}%, moving {statistics.mean(r[3] for r in rows):.1f} jobs)"
        )


if __name__ == "__main__":
    main()
