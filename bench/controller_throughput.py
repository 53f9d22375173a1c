#!/usr/bin/env python
"""controller_throughput: how many results per second ONE controller takes, and at what cost.

Its own moto server (ct_fleet.cloud.moto_server, over HTTP). For each size N it lays out a
fleet as a controller finds it mid-run (_stream.seed: bucket, queues, manifest, W worker
instances in EC2, and every job's result in S3: real one-sample toyarena logs), then runs
the controller's own tracking loop (FleetRun.tracking().track with the real FleetRun, ResultCollector
and JobTracker; bench/_controller.py) in a child process while a feeder thread here sends
every job's done report to the done queue the way workers' reporters do, with a heartbeat
per 16 results, never more than --backlog messages waiting. Reports a message: 25 by
default (as full as protocol.encode_reports packs them: moto's SQS, ~0.1 s a receive and
delete here, is then amortized and the controller's own work shows); `--per-message 1` is
a fleet of 16-slot workers running 30 s samples (each 1 s flush carries ~0.5 reports).

The fleet has --workers instances (50); a probe fleet of --probe-workers (500) has its
fleet check's DescribeInstances timed apart, since moto takes ~15 s to answer one of 500
here and the loop takes no report meanwhile: at 500 it would swamp the per-result figures.
The loop's per-receive bookkeeping (tracker questions and progress) is timed at 10,000 and
100,000 jobs, with the scans the tracker made before it kept counts beside it.

Reported per run: results per second end to end (first receive to the last result
verified on disk); the controller process's CPU seconds per result, and the moto server
process's apart (psutil); the controller's RSS before the stream, at its peak, and as
results came in; its AWS calls per result by API (botocore before-call hooks in the
child). Each size runs with no display, then (at the first size) with the live panel a
terminal gets and the plain lines a pipe gets, to price the display.

Targets: >= 300 results/s, or <= 3 ms of controller CPU per result with moto's share
apart; RSS growth flat in the number of results; the display costing nothing measurable.

    .venv/bin/python bench/controller_throughput.py            # 10,000 and 100,000 results, 50 workers
    .venv/bin/python bench/controller_throughput.py --quick    # 1,000 results
    .venv/bin/python bench/controller_throughput.py --jobs 10000 --displays none,live,plain
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
import _stream
import psutil
from rich.console import Console
from rich.table import Table

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer
from ct_fleet.controller.fleet import JobTracker
from ct_fleet.controller.reporting import progress_of
from ct_fleet.protocol import DoneMessage, result_key
from ct_fleet.services import instances
from ct_fleet.services import session as aws

TARGET_RATE = 300.0  # results per second
TARGET_CPU_MS = 3.0  # controller CPU per result, when moto is the ceiling
FLAT_KB = 0.1  # RSS per result once warmed up: 10 MB per 100,000 results
DISPLAY_SHARE = 0.01  # the display's own calls: 1% of the controller's CPU is below this machine's noise


def point_at(server: MotoServer) -> dict[str, str]:
    env = {
        "AWS_ENDPOINT_URL": server.endpoint_url,
        "AWS_ACCESS_KEY_ID": EMBEDDED_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": EMBEDDED_SECRET_KEY,
        "AWS_REGION": _stream.REGION,
        "AWS_DEFAULT_REGION": _stream.REGION,
    }
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "CT_FLEET_API_LOG"):
        os.environ.pop(key, None)
    os.environ.update(env)
    aws.reset()
    return env


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def one_run(
    server: MotoServer,
    fleet_id: str,
    spec: Any,
    bodies: list[str],
    tmp: Path,
    *,
    workers: int,
    display: str,
    backlog: int,
) -> dict[str, Any]:
    """The child controller takes the whole stream once; its report plus moto's CPU and the feeder's."""
    run_dir = tmp / f"run-{fleet_id}-{display}"
    argv = [
        c.PYTHON,
        str(Path(__file__).with_name("_controller.py")),
        *("--endpoint", server.endpoint_url, "--fleet-id", fleet_id, "--jobs", str(len(spec.jobs))),
        *("--workers", str(workers), "--run-dir", str(run_dir), "--display", display),
    ]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError("the controller child did not start")
    sqs = aws.client("sqs")
    done_url = sqs.get_queue_url(QueueName=f"lb-fleet-{fleet_id}-done")["QueueUrl"]
    moto = psutil.Process(server.pid)
    moto0 = cpu_seconds(moto)
    feeder = _stream.Feeder(sqs, done_url, bodies, backlog=backlog).start()
    child.stdin.write("go\n")
    child.stdin.flush()
    lines = child.stdout.read().splitlines()
    moto_cpu = cpu_seconds(moto) - moto0
    feeder.stop.set()
    feeder.join()
    if child.wait() != 0 or not lines:
        raise RuntimeError(f"the controller child exited {child.returncode}")
    report: dict[str, Any] = json.loads(lines[-1])
    report.update(moto_cpu=moto_cpu, sent=feeder.sent, feeder_waits=feeder.waits, messages=len(bodies))
    shutil.rmtree(run_dir, ignore_errors=True)
    return report


def bare_get_cpu_ms(s3: Any, fleet_id: str, spec: Any, count: int = 300) -> float:
    """CPU ms of one GetObject of a result (botocore, one thread, body read), in this process:
    the floor any controller that downloads each result through boto3 pays on this machine."""
    jobs = spec.jobs[:count]
    t0 = os.times()
    for job in jobs:
        s3.get_object(Bucket=_stream.BUCKET, Key=result_key(fleet_id, job.job_id))["Body"].read()
    t1 = os.times()
    return (t1.user + t1.system - t0.user - t0.system) / len(jobs) * 1000


def describe_cost(server: MotoServer, ec2: Any, fleet_id: str) -> dict[str, float]:
    """One fleet check's DescribeInstances (instances.live_instances) of the fleet's W
    workers: wall, this process's CPU (botocore parsing the XML) and moto's CPU, seconds."""
    moto = psutil.Process(server.pid)
    m0, c0, t0 = cpu_seconds(moto), os.times(), time.monotonic()
    found = instances.live_instances(ec2, fleet_id)
    t1, c1 = time.monotonic(), os.times()
    return {
        "instances": len(found),
        "wall": t1 - t0,
        "cpu": c1.user + c1.system - c0.user - c0.system,
        "moto_cpu": cpu_seconds(moto) - m0,
    }


def bookkeeping_ms(n: int, rounds: int = 500) -> tuple[float, float]:
    """Wall ms of the questions the tracking loop asks of the tracker on every receive (how
    many remain, is it complete) plus the progress it reports, with n jobs, half finished:
    (now, as the tracker answered them before it kept counts)."""
    tracker = JobTracker.of(f"job{i}" for i in range(n))
    for i in range(n // 2):
        report = DoneMessage(
            type="done", fleet_id="f", instance_id="i", worker_id="w", job_id=f"job{i}", outcome="success"
        )
        tracker.on_report(report)
        tracker.fetched(f"job{i}", ok=True)
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(rounds):
        _ = tracker.complete, tracker.remaining, tracker.remaining
        progress_of(
            tracker, total=n, depths={}, workers=500, slots=8000, elapsed=1.0, cost=None, tokens=0, model_cost=0.0
        )
    now = (time.perf_counter() - t0) / rounds * 1000
    # The same questions as the tracker answered them before it kept counts: a scan of
    # every job's state for each, and of every outcome twice for the progress.
    state, outcome = tracker.state, tracker.outcome
    few = max(1, rounds // 10)
    t0 = time.perf_counter()
    for _ in range(few):
        _ = all(v in ("finished", "dead") for v in state.values())
        _ = sum(1 for v in state.values() if v == "pending"), sum(1 for v in state.values() if v == "pending")
        _ = sum(1 for o in outcome.values() if o != "success"), [j for j, o in outcome.items() if o == "failed"]
    before = (time.perf_counter() - t0) / few * 1000
    return now, before


def rss_slope(report: dict[str, Any]) -> float:
    """KB of RSS per result over the second half of the stream: the state kept per result,
    once the allocator's and the clients' warm-up (most of the growth before) is done."""
    n = report["jobs"]
    half = [(finished, rss) for finished, rss in report["rss_samples"] if finished >= n // 2]
    if len(half) < 2 or half[-1][0] == half[0][0]:
        return 0.0
    return (half[-1][1] - half[0][1]) * 1024 / (half[-1][0] - half[0][0])


def rss_growth(report: dict[str, Any]) -> float:
    """MB the controller's RSS grew from 10% of the results to its last sample."""
    samples = report["rss_samples"]
    n = report["jobs"]
    after = [rss for finished, rss in samples if finished >= n // 10]
    return (after[-1] - after[0]) if len(after) > 1 else 0.0


def table_of(reports: list[dict[str, Any]]) -> Table:
    table = Table(title="one controller taking a stream of done reports (embedded moto)")
    for col in (
        "results",
        "display",
        "wall s",
        "results/s",
        "ctl CPU ms/result",
        "moto CPU ms/result",
        "display CPU ms/result",
        "RSS before MB",
        "peak RSS MB",
        "growth 10%->end MB",
        "KB/result 2nd half",
        "calls/result",
    ):
        table.add_column(col, justify="right")
    for r in reports:
        n = r["jobs"]
        table.add_row(
            f"{n:,}",
            r["display"],
            f"{r['wall_all_in']:.1f}",
            f"{n / r['wall_all_in']:.0f}",
            f"{(r['cpu_user'] + r['cpu_system']) / n * 1000:.2f}",
            f"{r['moto_cpu'] / n * 1000:.2f}",
            f"{r.get('display_cpu', 0.0) / n * 1000:.3f}",
            f"{r['rss_before_mb']:.0f}",
            f"{r['peak_rss_mb']:.0f}",
            f"{rss_growth(r):.1f}",
            f"{rss_slope(r):.2f}",
            f"{sum(r['calls'].values()) / n:.3f}",
        )
    return table


def calls_table(reports: list[dict[str, Any]]) -> Table:
    table = Table(title="controller AWS calls per result, by API")
    names = sorted({k for r in reports for k in r["calls"]})
    table.add_column("call")
    for r in reports:
        table.add_column(f"{r['jobs']:,} {r['display']}", justify="right")
    for name in names:
        table.add_row(name, *(f"{r['calls'].get(name, 0) / r['jobs']:.4f}" for r in reports))
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--jobs", default="10000,100000", help="sizes, comma-separated")
    ap.add_argument("--workers", type=int, default=50, help="the fleet's worker instances in EC2")
    ap.add_argument(
        "--probe-workers", type=int, default=500, help="instances of a fleet whose DescribeInstances is timed apart"
    )
    ap.add_argument("--per-message", type=int, default=25, help="done reports per SQS message")
    ap.add_argument("--backlog", type=int, default=40, help="most messages waiting on the done queue")
    ap.add_argument("--displays", default="none,live,plain", help="displays to run at the first size")
    ap.add_argument("--out", type=Path, help="write every run's report (with its RSS samples) here, as JSON")
    ap.add_argument("--quick", action="store_true", help="1,000 results")
    args = ap.parse_args()
    if args.quick:
        args.jobs = "1000"
    sizes = [int(s) for s in args.jobs.split(",")]
    console = Console(width=max(Console().width, 140))
    tmp = c.bench_tmp("throughput")
    server = MotoServer(log_path=tmp / "moto.log").start()
    reports = []
    get_ms: dict[int, float] = {}
    describe: dict[int, dict[str, float]] = {}
    try:
        point_at(server)
        clients = {name: aws.client(name) for name in ("s3", "sqs", "ec2")}
        for i, n in enumerate(sizes):
            fleet_id = f"benchtput{n:07d}"
            spec = _stream.plan(n, fleet_id=fleet_id, workers=args.workers)
            t0 = time.monotonic()
            _, ids = _stream.seed(clients, spec, _stream.result_bodies(spec.jobs, tmp), workers=args.workers)
            console.print(f"[dim]seeded {n:,} results and {len(ids)} instances in {time.monotonic() - t0:.0f}s[/]")
            stream = _stream.report_bodies(spec, ids, per_message=args.per_message)
            get_ms[n] = bare_get_cpu_ms(clients["s3"], fleet_id, spec)
            describe[n] = describe_cost(server, clients["ec2"], fleet_id)
            for display in args.displays.split(",") if i == 0 else ["none"]:
                r = one_run(
                    server, fleet_id, spec, stream, tmp, workers=args.workers, display=display, backlog=args.backlog
                )
                reports.append(r)
                console.print(
                    f"[dim]{n:,} {display}: {n / r['wall_all_in']:.0f} results/s, "
                    f"ctl {(r['cpu_user'] + r['cpu_system']) / n * 1000:.2f} ms/result, "
                    f"moto {r['moto_cpu'] / n * 1000:.2f} ms/result, stopped={r['stopped']}[/]"
                )
                if r["finished"] != n or r["local_results"] != n or r["stopped"]:
                    raise RuntimeError(f"the controller took {r['finished']}/{n} ({r['stopped']}): {r['warnings']}")
        if args.probe_workers:
            _stream.launch_instances(clients["ec2"], "benchprobe", args.probe_workers)
            describe[0] = describe_cost(server, clients["ec2"], "benchprobe")
    finally:
        server.stop()
    book = {k: bookkeeping_ms(k) for k in (10_000, 100_000)}
    for r in reports:
        r["bare_get_ms"] = get_ms[r["jobs"]]
    console.print(table_of(reports))
    console.print(
        "bare GetObject (botocore, one thread, this process): "
        + ", ".join(f"{v:.2f} ms CPU at {k:,}" for k, v in get_ms.items())
        + "; the loop's tracker questions and progress per receive: "
        + ", ".join(f"{v[0]:.3f} ms at {k:,} jobs (scanning every job: {v[1]:.1f} ms)" for k, v in book.items())
    )
    for n, d in describe.items():
        console.print(
            f"a fleet check's DescribeInstances of {d['instances']:.0f} workers"
            + (f" (the {n:,}-result fleet)" if n else " (a probe fleet)")
            + f": {d['wall']:.2f} s wall, "
            f"{d['cpu']:.2f} s CPU here (botocore), {d['moto_cpu']:.2f} s moto CPU; the loop takes no report meanwhile"
        )
    console.print(calls_table(reports))
    console.print(f"[dim]{c.machine()}; load average {os.getloadavg()[0]:.1f}; temp dir {tmp} (removed)[/]")
    if args.out:
        args.out.write_text(json.dumps(reports))  # with the RSS samples
    print(json.dumps([{k: v for k, v in r.items() if k != "rss_samples"} for r in reports]))
    verdict = summarize(reports)
    print(verdict[0])
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if verdict[1] else 3


def summarize(reports: list[dict[str, Any]]) -> tuple[str, bool]:
    base = [r for r in reports if r["display"] == "none"]
    largest = max(base, key=lambda r: r["jobs"])
    n = largest["jobs"]
    rate = n / largest["wall_all_in"]
    cpu_ms = (largest["cpu_user"] + largest["cpu_system"]) / n * 1000
    fast = rate >= TARGET_RATE or cpu_ms <= TARGET_CPU_MS
    growth = {r["jobs"]: rss_growth(r) for r in base}
    slope = {r["jobs"]: rss_slope(r) for r in base}
    # Flat: once warmed up, RSS stops growing with the results (<= 10 MB per 100,000).
    flat = max(slope.values()) <= FLAT_KB
    first = reports[0]["jobs"]
    none_ms = next(r for r in reports if r["jobs"] == first and r["display"] == "none")
    per = {r["display"]: (r["cpu_user"] + r["cpu_system"]) / first * 1000 for r in reports if r["jobs"] == first}
    # The display's own calls, timed on the loop's thread, against the controller's CPU: the
    # process totals of back-to-back runs differ by more than 10% on this shared machine.
    share = {
        r["display"]: r.get("display_cpu", 0.0) / (r["cpu_user"] + r["cpu_system"])
        for r in reports
        if r["jobs"] == first and r["display"] != "none"
    }
    cheap = all(v <= DISPLAY_SHARE for v in share.values())
    line = (
        f"controller_throughput: {n:,} results at {rate:.0f}/s, controller {cpu_ms:.2f} ms CPU/result "
        f"(moto {largest['moto_cpu'] / n * 1000:.2f}) (target >= {TARGET_RATE:.0f}/s or <= {TARGET_CPU_MS} ms: "
        f"{'MET' if fast else 'MISSED'}); RSS growth over the stream "
        + ", ".join(
            f"{g:.1f} MB at {k:,} ({slope[k]:.2f} KB/result over its second half)" for k, g in sorted(growth.items())
        )
        + f" (flat, <= {FLAT_KB} KB/result: {'MET' if flat else 'MISSED'}); display CPU/result "
        + ", ".join(f"{d} {ms:.2f}" for d, ms in per.items())
        + f" ms at {first:,}, the display's own calls "
        + ", ".join(f"{d} {v:.2%}" for d, v in share.items())
        + f" of the controller's CPU (nothing measurable, <= {DISPLAY_SHARE:.0%}: {'MET' if cheap else 'MISSED'}); "
        f"{sum(largest['calls'].values()) / n:.3f} AWS calls/result; baseline wall {none_ms['wall_all_in']:.1f}s"
    )
    return line, fast and flat and cheap


if __name__ == "__main__":
    sys.exit(main())
