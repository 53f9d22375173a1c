#!/usr/bin/env python
"""checkpoint_drill: a long agent sample on the local fleet whose worker is killed at two
thirds, with and without --checkpoint.

The sample is a react() agent of N steps (tests/testkit/openai_stub.py's "Take N steps of S
seconds": N-1 bash calls that sleep S seconds each, one that reads back a file, a submit;
N+1 model calls) against the loopback OpenAI-compatible stub, run by `bin/ct-fleet eval`
on local workers and the embedded cloud (one worker; a replacement is launched when it is
lost). Five runs, each a fleet of its own:
  plain, undisturbed          the baseline: model calls, wall time, the sample's time
  --checkpoint, undisturbed   what checkpointing costs: seconds per turn, bytes stored
  plain, killed at 2/3        the worker's job loop SIGKILLed after 2/3 of the calls
  --checkpoint, killed at 2/3 the same; the replacement resumes from the last checkpoint
  --checkpoint, power cut     the controller, its embedded cloud and the worker SIGKILLed
                              after 2/3 of the calls, the command run again: it puts the
                              copy of the checkpoints kept on disk back in its new S3
Reported: model calls and wall time to completion (the CLI's, launch to exit) of each, the
calls made again, what the run's summary says it resumed and saved, and the cost of a
checkpoint: the undisturbed sample's time with checkpoints minus without, per turn, beside
Inspect's own per-checkpoint figures (its checkpoint events' duration and bytes added) and
the most the job's checkpoint prefix held in S3 (polled during the run).

Not a test (bench/README.md): it takes minutes and its figures are timings.

    .venv/bin/python bench/checkpoint_drill.py                     # 15 steps of 2 s, ~6 min
    .venv/bin/python bench/checkpoint_drill.py --steps 13 --pause 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import psutil
from inspect_ai.log import read_eval_log

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

from ct_fleet.cloud.moto_server import credentials  # noqa: E402

KEY = "sk-drill-" + uuid.uuid4().hex
MODEL = "openai-api/stubai/scripted"
AGENT = """
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import bash


@task
def steps(n: int = 13, pause: float = 0.5):
    sample = Sample(id="long", input=f"Take {n} steps of {pause} seconds", target=f"step {n - 1}")
    return Task(dataset=MemoryDataset([sample], name="steps"), solver=react(tools=[bash()]), scorer=includes(), sandbox="local")
"""
KNOBS = ["idle_timeout=3", "retry_backoff=1", "max_workers=1", "heartbeat_interval=2"]


def calls(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if json.loads(line)["status"] == 200) if log.exists() else 0


def under(runs: Path) -> list[psutil.Process]:
    """Every process working under runs/ (the local workers, their jobs and sandboxes' commands)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if str(runs) in proc.cwd() and proc.pid != os.getpid():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def power_cut(proc: subprocess.Popen[bytes], runs: Path) -> None:
    """The controller, its embedded cloud and every worker SIGKILLed, as a machine that
    restarts would leave them: only the run directory is left."""
    proc.send_signal(signal.SIGKILL)  # bin/ct-fleet execs python: this is the controller
    proc.wait()
    for pid_file in runs.glob("*/moto.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    while left := under(runs):
        for p in left:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        time.sleep(0.2)


def job_loops(runs: Path) -> list[psutil.Process]:
    """The local workers' job loops (`python -m ct_fleet.worker`) working under runs/."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(runs) in proc.cwd() and "ct_fleet.worker" in (proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@dataclass
class Run:
    calls: int
    wall: float
    sample_time: float
    model_events: int
    summary: str
    checkpoints: list[tuple[float, int]] = field(default_factory=list)  # Inspect's (seconds, bytes added) each
    stored_max: int = 0  # the most bytes the fleet's checkpoints prefix held at once
    killed_at: float | None = None  # seconds into the run


class S3Watch:
    """Polls the fleet's checkpoints prefix in the embedded cloud's S3 while the run goes
    on (the worker deletes it once the result is stored): the most bytes it held."""

    def __init__(self, runs: Path) -> None:
        self.runs, self.most = runs, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        client = None
        while not self._stop.wait(0.5):
            try:
                run_dir = next(p for p in self.runs.iterdir() if (p / "moto.port").exists())
                if client is None:
                    port = (run_dir / "moto.port").read_text().strip()
                    key, secret = credentials(run_dir / "moto.log")  # the fleet's own (the server takes no other)
                    client = boto3.client(
                        "s3",
                        endpoint_url=f"http://127.0.0.1:{port}",
                        region_name="us-east-1",
                        aws_access_key_id=key,
                        aws_secret_access_key=secret,
                    )
                total = 0
                for bucket in client.list_buckets()["Buckets"]:
                    pages = client.get_paginator("list_objects_v2").paginate(
                        Bucket=bucket["Name"], Prefix=f"{run_dir.name}/checkpoints/"
                    )
                    total += sum(o["Size"] for page in pages for o in page.get("Contents", []))
                self.most = max(self.most, total)
            except Exception:
                continue  # not up yet, or gone

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.most


class Drill:
    def __init__(self, base: Path, stub_url: str, stub_log: Path, steps: int, pause: float) -> None:
        self.base, self.stub_url, self.stub_log = base, stub_url, stub_log
        self.steps, self.pause = steps, pause
        self.project = base / "project"
        self.project.mkdir()
        (self.project / "agent.py").write_text(AGENT)

    def run(self, name: str, checkpoint: bool, kill_at: int | None, cut: bool = False) -> Run:
        runs, home = self.base / f"runs-{name}", self.base / f"home-{name}"
        runs.mkdir()
        home.mkdir()  # the bash tool's login shell reads none of this machine's profile
        (runs / ".env").write_text(f"STUBAI_API_KEY={KEY}\nSTUBAI_BASE_URL={self.stub_url}\n")
        args = [str(REPO / "bin" / "ct-fleet"), "eval", "agent.py@steps", "--model", MODEL]
        args += ["-T", f"n={self.steps}", "-T", f"pause={self.pause}"]
        args += ["--checkpoint", "turn:1"] if checkpoint else []
        for knob in KNOBS:
            args += ["--ec2-arg", knob]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(CT_FLEET_RUNS=str(runs), CT_FLEET_DOTENV=str(runs / ".env"), HOME=str(home))
        before, start = calls(self.stub_log), time.monotonic()
        watch = S3Watch(runs)
        with open(self.base / f"cli-{name}.log", "w") as out:
            proc = subprocess.Popen(args, cwd=self.project, env=env, stdout=out, stderr=subprocess.STDOUT)
            killed_at = None
            if kill_at is not None:
                while calls(self.stub_log) - before < kill_at and proc.poll() is None:
                    time.sleep(0.05)
                if cut:
                    power_cut(proc, runs)
                else:
                    for loop in job_loops(runs):
                        loop.send_signal(signal.SIGKILL)
                killed_at = time.monotonic() - start
            if cut:  # the command run again: a new embedded cloud, the copy on disk put back
                proc = subprocess.Popen(args, cwd=self.project, env=env, stdout=out, stderr=subprocess.STDOUT)
            code = proc.wait()
        wall = time.monotonic() - start
        stored = watch.stop()
        text = (self.base / f"cli-{name}.log").read_text()
        if code != 0:
            raise SystemExit(f"the {name} run exited {code}: see {self.base / f'cli-{name}.log'}")
        (run_dir,) = [p for p in runs.iterdir() if (p / "manifest.json").exists()]
        (merged,) = (run_dir / "merged").glob("*.eval")
        sample = (read_eval_log(str(merged)).samples or [])[0]
        events = [e for e in sample.events if e.event == "checkpoint"]
        summary = " ".join(line for line in text.splitlines() if re.search(r"attempts|resumed from|put back", line))
        return Run(
            calls=calls(self.stub_log) - before,
            wall=wall,
            sample_time=sample.total_time or 0.0,
            model_events=sum(1 for e in sample.events if e.event == "model"),
            summary=" ".join(summary.split()),
            checkpoints=[(getattr(e, "duration_ms", 0) / 1000, getattr(e, "size_bytes", 0)) for e in events],
            stored_max=stored,
            killed_at=killed_at,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories (printed)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ckpt-drill-"))
    stub_log = base / "stub.log"
    stub = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "testkit" / "openai_stub.py"), "--port-file", str(base / "port")]
        + ["--log", str(stub_log), "--rate-limit-every", "0"],
        env={**os.environ, "STUB_API_KEY": KEY},
    )
    total = args.steps + 1
    kill_at = total * 2 // 3
    try:
        while not (base / "port").exists() or not (base / "port").read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{(base / 'port').read_text()}/v1"
        drill = Drill(base, url, stub_log, args.steps, args.pause)
        rows = {
            "plain": drill.run("plain", False, None),
            "--checkpoint turn:1": drill.run("ckpt", True, None),
            "plain, killed": drill.run("plain-killed", False, kill_at),
            "--checkpoint turn:1, killed": drill.run("ckpt-killed", True, kill_at),
            "--checkpoint turn:1, power cut": drill.run("ckpt-cut", True, kill_at, cut=True),
        }
    finally:
        stub.terminate()
        stub.wait()
    print(
        f"agent of {args.steps} steps ({total} model calls, bash calls sleep {args.pause}s) on the local fleet; "
        f"killed runs: the worker's job loop SIGKILLed after {kill_at} calls"
    )
    print(f"{'run':<30}{'model calls':>12}{'redone':>8}{'wall s':>9}{'killed at s':>13}{'sample s':>10}")
    for name, r in rows.items():
        killed = f"{r.killed_at:.1f}" if r.killed_at is not None else "-"
        print(
            f"{name:<30}{r.calls:>12}{r.calls - total:>8}{r.wall:>9.1f}{killed:>13}{r.sample_time:>10.1f}   {r.summary}"
        )
    plain, ckpt = rows["plain"], rows["--checkpoint turn:1"]
    per_turn = (ckpt.sample_time - plain.sample_time) / total
    own = ckpt.checkpoints
    mean_s = sum(s for s, _ in own) / len(own) if own else float("nan")
    mean_b = sum(b for _, b in own) / len(own) if own else 0
    print(
        f"checkpoint cost per turn: {per_turn:.2f} s (undisturbed sample time with minus without, / {total}); "
        f"Inspect's own: {len(own)} checkpoints, {mean_s:.2f} s and {mean_b / 1024:.1f} KB added each "
        f"(to the local commit, before the copy to S3)"
    )
    print(
        f"checkpoint prefix in S3 at most: {ckpt.stored_max / 1024:.0f} KB undisturbed, "
        f"{rows['--checkpoint turn:1, killed'].stored_max / 1024:.0f} KB killed (deleted once the result is stored)"
    )
    cut = rows["--checkpoint turn:1, power cut"]
    print(
        f"power cut (controller, embedded cloud and worker SIGKILLed at 2/3, the command run again): "
        f"{cut.calls} model calls, {cut.wall:.0f} s to completion"
    )
    pk, ck = rows["plain, killed"], rows["--checkpoint turn:1, killed"]
    print(
        f"checkpoint_drill: killed at 2/3, --checkpoint made {ck.calls} model calls in {ck.wall:.0f} s "
        f"against {pk.calls} in {pk.wall:.0f} s without ({total} undisturbed)"
    )
    if args.keep:
        print(f"runs kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
