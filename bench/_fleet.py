"""Run `ct-fleet eval` on the embedded cloud through bench/_probe.py and read back what
happened (not a benchmark itself): every job's worker timestamps, the controller's
phases, each worker's start, and the per-sample times Inspect recorded in the results.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import time
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import _common as c

from ct_fleet.protocol import run_layout

PROBE = str(Path(__file__).with_name("_probe.py"))
WORKER_START = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO Found credentials")


@dataclass
class Job:
    job_id: str
    sample_id: str
    epoch: int
    instance: str
    received: float
    started: float
    finished: float
    total_time: float | None = None  # the sample's own time, as Inspect logged it

    @property
    def worker_time(self) -> float:
        return self.finished - self.received


@dataclass
class FleetRun:
    wall: float  # the CLI process, start to exit, as this bench saw it
    t0: float  # when the CLI was started
    phases: dict[str, tuple[float, float]]  # first start, last end of each probed phase
    first_work_sent: float
    jobs: list[Job]
    worker_started: dict[str, float]  # instance -> its job loop's first log line
    run_dir: Path
    cli_log: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def phase(self, name: str) -> float:
        t0, t1 = self.phases[name]
        return t1 - t0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_fleet(name: str, args: list[str], tmp: Path, env_extra: dict[str, str] | None = None) -> FleetRun:
    """`ct-fleet eval ARGS` in its own runs dir; raises SystemExit when it fails."""
    record = tmp / f"probe-{name}.jsonl"
    runs = tmp / f"runs-{name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "CT_FLEET_API_LOG"}
    env.update(CT_FLEET_RUNS=str(runs), CT_FLEET_DOTENV=str(tmp / "none.env"), **(env_extra or {}))
    log = tmp / f"cli-{name}.log"
    t0 = time.time()
    with open(log, "w") as out:
        rc = subprocess.run(
            [c.PYTHON, PROBE, str(record), "eval", *args], cwd=c.REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        ).returncode
    wall = time.time() - t0
    if rc != 0:
        raise SystemExit(f"ct-fleet exited {rc}: see {log}")
    return read_run(record, runs, wall, t0, log)


def read_run(record: Path, runs: Path, wall: float, t0: float, log: Path) -> FleetRun:
    (run_dir,) = [p for p in runs.iterdir() if (p / "manifest.json").exists()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    keys = {j["job_id"]: (j["sample_id"], j["epoch"]) for j in manifest["jobs"]}
    phases: dict[str, tuple[float, float]] = {}
    first_send = None
    jobs: dict[str, Job] = {}
    for line in record.read_text().splitlines():
        ev = json.loads(line)
        if ev["ev"] == "phase":
            a, b = phases.get(ev["name"], (ev["t0"], ev["t1"]))
            phases[ev["name"]] = (min(a, ev["t0"]), max(b, ev["t1"]))
        elif ev["ev"] == "send" and ev["queue"] == "work" and first_send is None:
            first_send = ev["t"]
        elif ev["ev"] == "done" and ev["msg"]["type"] == "done":
            m = ev["msg"]
            if m["outcome"] in ("success", "sample_error") and m["job_id"] not in jobs:
                sid, epoch = keys[m["job_id"]]
                jobs[m["job_id"]] = Job(
                    m["job_id"], sid, epoch, m["instance_id"], m["received_at"], m["started_at"], m["finished_at"]
                )
    for job in jobs.values():
        job.total_time = sample_total_time(run_layout.job_log(run_dir, job.job_id))
    started = {}
    for boot_log in run_dir.glob("instances/*/var/log/linuxbench-bootstrap.log"):
        for text in boot_log.read_text(errors="replace").splitlines():
            match = WORKER_START.match(text)
            if match:
                when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                started[boot_log.parents[2].name] = when
                break
    return FleetRun(
        wall=wall,
        t0=t0,
        phases=phases,
        first_work_sent=first_send or float("nan"),
        jobs=sorted(jobs.values(), key=lambda j: j.received),
        worker_started=started,
        run_dir=run_dir,
        cli_log=log,
    )


def sample_total_time(path: Path) -> float | None:
    """The one sample's total_time from a result's summaries (no full parse)."""
    try:
        with zipfile.ZipFile(path) as zf:
            rows = json.loads(zf.read("summaries.json"))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError):
        return None
    value = rows[0].get("total_time") if rows else None
    return float(value) if value is not None else None


def fixed_costs(run: FleetRun) -> list[tuple[str, float]]:
    """The parts of a run that are not jobs, one by one (seconds)."""
    jobs = run.jobs
    launch_end = run.phases["launch"][1]
    first_worker = min(run.worker_started.values()) if run.worker_started else float("nan")
    first_received = jobs[0].received
    last_finished = max(j.finished for j in jobs)
    track_end = run.phases["track"][1]
    rows = [
        (
            "CLI start to the embedded cloud (imports, plan, code archive)",
            run.phases["embedded cloud start"][0] - run.t0,
        ),
        ("embedded cloud start (moto server)", run.phase("embedded cloud start")),
        ("account set-up, credentials, resume check", run.phases["enqueue"][0] - run.phases["embedded cloud start"][1]),
        ("enqueue", run.phase("enqueue")),
        ("launch (EC2 API, secrets, local instances)", run.phase("launch")),
        ("bootstrap (launch to the first worker's job loop)", first_worker - launch_end),
        ("worker start to its first job received", first_received - first_worker),
        ("end of run: last job finished to every result in", track_end - last_finished),
        ("teardown (stop signal, workers leave, queues deleted)", run.phase("teardown")),
        ("merge", run.phase("merge")),
        ("embedded cloud stop and CLI exit", run.t0 + run.wall - run.phases["merge"][1]),
    ]
    return rows
