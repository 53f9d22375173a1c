"""The controller side of bench/controller_throughput.py: ONE controller's result collection,
the real one, fed by whatever is on the fleet's done queue.

`collector_run()` builds the controller's FleetRun for a fleet that `_stream.seed` laid out
(its queues, manifest and worker instances found in the cloud, as an adopting controller
finds them) and `take()` runs `FleetRun.tracking().track`, the loop a run spends its life in: receive
done reports, hand them to the ResultCollector (tracker, download pool, verification, local
copies), delete them, look at EC2 and the queues every check_interval, report progress,
and at the end check every local copy again. The cloud is the base `Cloud` on the moto
server's endpoint: no local instance runner, so the fleet's instances run nothing.

Run as a child (`python bench/_controller.py ARGS`), it waits for a line on stdin, takes
the stream, and prints one JSON line: its own wall and CPU time, RSS as results came in,
and its AWS calls by API (a botocore before-call hook on each of its clients).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _stream
import psutil
from rich.console import Console

from ct_fleet.cli.display import LiveProgress
from ct_fleet.cloud import Cloud
from ct_fleet.controller.fleet.run import FleetRun
from ct_fleet.controller.planning import Capacity, FleetSpec
from ct_fleet.controller.reporting import Progress
from ct_fleet.services import queues


class CallCounter:
    """AWS calls by service:Operation, counted as botocore makes them (retries not included)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def watch(self, client: Any) -> None:
        client.meta.events.register("before-call.*.*", self._hit)

    def _hit(self, event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        with self._lock:
            self.counts[f"{service}:{operation}"] += 1


def collector_run(
    endpoint: str, spec: FleetSpec, run_dir: Path, *, on_progress: Any = None
) -> tuple[FleetRun, list[str]]:
    """The controller's FleetRun, adopting the seeded fleet (its queues and its workers),
    and the list its warnings go to."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cloud = Cloud(_stream.REGION, endpoint_url=endpoint)
    warnings: list[str] = []
    run = FleetRun(
        cloud,
        spec,
        run_dir,
        launched_by="bench",
        warn=warnings.append,
        on_progress=on_progress or (lambda p: None),
        capacity=Capacity([], "", spec.config.max_workers or 1),
    )
    found = queues.find_queues(run.sqs, spec.fleet_id)
    assert found is not None, f"no queues for fleet {spec.fleet_id}: seed it first"
    run.q = found
    run.pool.adopt(run.pool.live_ids())
    return run, warnings


def take(run: FleetRun) -> str | None:
    """Run the controller's tracking loop until every job is finished (None) or it stops (why)."""
    return run.tracking().track(time.monotonic())


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--fleet-id", required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--display", choices=("none", "live", "plain"), default="none")
    args = ap.parse_args()
    spec = _stream.plan(args.jobs, fleet_id=args.fleet_id, workers=args.workers)
    all_in: list[float] = []
    samples: list[tuple[int, float]] = []
    devnull = open(os.devnull, "w")  # lives as long as the process
    # A terminal's live panel (rich Live, redrawn 4 times a second) or the plain lines a
    # pipe gets; "none" is the baseline without any display.
    live = LiveProgress(Console(file=devnull, force_terminal=args.display == "live", width=160))

    display_cpu = [0.0]  # CPU seconds spent in the display's own calls, on the loop's thread

    def progress(p: Progress) -> None:
        if args.display != "none":
            c0 = time.thread_time()
            live.update(p)
            display_cpu[0] += time.thread_time() - c0
        if p.done + p.failed >= args.jobs and not all_in:
            all_in.append(time.monotonic())

    run, warnings = collector_run(args.endpoint, spec, args.run_dir, on_progress=progress)
    calls = CallCounter()
    for client in run.cloud._clients.values():
        calls.watch(client)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.25):
            samples.append((run.state.finished, _rss_mb()))

    sampler = threading.Thread(target=sample, daemon=True)
    rss_before = _rss_mb()
    print("ready", flush=True)
    sys.stdin.readline()  # the parent starts the feeder, then says go
    if args.display != "none":
        live.__enter__()
    sampler.start()
    cpu0, t0 = os.times(), time.monotonic()
    why = take(run)
    t1, cpu1 = time.monotonic(), os.times()
    stop.set()
    sampler.join()
    c0 = time.thread_time()
    live.stop()
    display_cpu[0] += time.thread_time() - c0
    run.results.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {
        "jobs": args.jobs,
        "display": args.display,
        "stopped": why,
        "finished": run.state.finished,
        "final": dict(Counter(run.state.final.values())),
        "duplicates": run.state.duplicates,
        "local_results": sum(1 for _ in (args.run_dir / "jobs").glob("*.evaljob")),
        "wall": t1 - t0,
        "wall_all_in": (all_in[0] if all_in else t1) - t0,
        "cpu_user": cpu1.user - cpu0.user,
        "cpu_system": cpu1.system - cpu0.system,
        "display_cpu": display_cpu[0],
        "rss_before_mb": rss_before,
        "peak_rss_mb": peak,
        "rss_samples": samples,
        "calls": dict(calls.counts),
        "warnings": warnings[:20],
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
