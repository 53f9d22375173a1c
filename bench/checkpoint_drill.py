#!/usr/bin/env python
"""checkpoint_drill: a long agent sample whose job is killed at two thirds, with and
without --checkpoint, resumed (or restarted) by a job process elsewhere.

The sample is a react() agent of N steps (tests/openai_stub.py's "Take N steps of S
seconds": N-1 bash calls that sleep S seconds each, one that reads back a file, a submit;
N+1 model calls) against a loopback OpenAI-compatible server, run as a worker runs a job
(`python -m ct_fleet.worker.runner`) with its checkpoints in a moto S3 prefix. Each mode:
  1. an undisturbed run (the baseline: model calls, wall time);
  2. the same job SIGKILLed after 2/3 of its model calls, then run again from another
     directory with nothing of the first one's on disk (a redelivery to another worker).
Reported per mode: model calls and wall time to completion (kill + rerun), against the
baseline; with --checkpoint also the cost per checkpoint (the undisturbed run's wall time
with checkpoints minus without, per turn) and the bytes stored.

Not the local fleet: the job's redelivery (visibility timeout, backoff) is left out, so
the figures are the sample's own. The drill runs on the local fleet's code path for a
job (the runner, the S3 prefix, eval_retry).

    .venv/bin/python bench/checkpoint_drill.py               # 15 steps of 2 s
    .venv/bin/python bench/checkpoint_drill.py --steps 13 --pause 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import boto3

from ct_fleet.cloud.moto_server import MotoServer
from ct_fleet.protocol import WorkMessage
from ct_fleet.worker import checkpoints

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-drill-" + uuid.uuid4().hex
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
CONFIG = {"trigger": {"type": "turn", "every": 1}, "sandbox_paths": {"default": []}}


def calls(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if json.loads(line)["status"] == 200) if log.exists() else 0


class Drill:
    def __init__(self, base: Path, endpoint: str, stub_url: str, stub_log: Path, steps: int, pause: float) -> None:
        self.base, self.endpoint, self.stub_url, self.stub_log = base, endpoint, stub_url, stub_log
        self.steps, self.pause = steps, pause
        self.s3 = boto3.client(
            "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.bucket = "drill"
        self.s3.create_bucket(Bucket=self.bucket)

    def job(self, job_id: str, checkpoint: bool) -> WorkMessage:
        return WorkMessage(
            fleet_id="drill",
            job_id=job_id,
            sample_id="long",
            epoch=1,
            task_spec="agent.py@steps",
            task_args={"n": self.steps, "pause": self.pause},
            model="openai-api/stubai/scripted",
            code_sha="x",
            result_key=f"drill/{job_id}.eval",
            time_limit=None,
            inspect_options={"checkpoint": {"checkpoint_file": CONFIG}} if checkpoint else {},
        )

    def start(self, job: WorkMessage, where: Path) -> subprocess.Popen[bytes]:
        where.mkdir(parents=True)
        (where / "agent.py").write_text(AGENT)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID="x",
            AWS_SECRET_ACCESS_KEY="x",
            AWS_REGION="us-east-1",
            STUBAI_API_KEY=KEY,
            STUBAI_BASE_URL=self.stub_url,
            XDG_CACHE_HOME=str(where / "cache"),
            XDG_DATA_HOME=str(where / "data"),
        )
        if checkpoints.wanted(job):
            env[checkpoints.CHECKPOINTS_ENV] = checkpoints.location(self.bucket, job.fleet_id, job.job_id)
        err = open(where / "stderr", "wb")
        return subprocess.Popen(
            [sys.executable, "-m", "ct_fleet.worker.runner", job.to_json(), str(where / "out.eval")],
            cwd=where,
            env=env,
            stdout=err,
            stderr=err,
            start_new_session=True,
        )

    def stored(self, job_id: str) -> int:
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=f"drill/checkpoints/{job_id}/")
        return sum(o["Size"] for o in listed.get("Contents", []))

    def run(self, checkpoint: bool, kill_at: int | None) -> dict[str, float]:
        job = self.job(uuid.uuid4().hex[:8], checkpoint)
        before, start = calls(self.stub_log), time.monotonic()
        proc = self.start(job, self.base / uuid.uuid4().hex[:8])
        stored = 0
        if kill_at is not None:
            while calls(self.stub_log) - before < kill_at and proc.poll() is None:
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc = self.start(job, self.base / uuid.uuid4().hex[:8])
        if proc.wait() != 0:
            raise SystemExit(f"the job failed: see {self.base}")
        stored = self.stored(job.job_id)
        return {"calls": calls(self.stub_log) - before, "seconds": time.monotonic() - start, "bytes": stored}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--pause", type=float, default=2.0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ckpt-drill-"))
    stub_log = base / "stub.log"
    stub = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "openai_stub.py"), "--port-file", str(base / "port")]
        + ["--log", str(stub_log), "--rate-limit-every", "0"],
        env={**os.environ, "STUB_API_KEY": KEY},
    )
    try:
        while not (base / "port").exists() or not (base / "port").read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{(base / 'port').read_text()}/v1"
        with MotoServer(log_path=base / "moto.log", lease_timeout=600) as moto:
            drill = Drill(base, moto.endpoint_url, url, stub_log, args.steps, args.pause)
            total = args.steps + 1
            kill_at = total * 2 // 3
            rows = {}
            for mode, checkpoint in (("plain", False), ("--checkpoint turn:1", True)):
                rows[mode] = {"baseline": drill.run(checkpoint, None), "killed": drill.run(checkpoint, kill_at)}
    finally:
        stub.terminate()
        stub.wait()
    print(
        f"agent of {args.steps} steps ({total} model calls, tool calls sleep {args.pause}s), killed after {kill_at} calls"
    )
    print(f"{'mode':<22}{'calls':>7}{'wall s':>9}{'killed: calls':>15}{'wall s':>9}{'redone calls':>14}")
    for mode, r in rows.items():
        b, k = r["baseline"], r["killed"]
        print(
            f"{mode:<22}{b['calls']:>7.0f}{b['seconds']:>9.1f}{k['calls']:>15.0f}{k['seconds']:>9.1f}"
            f"{k['calls'] - b['calls']:>14.0f}"
        )
    plain, ckpt = rows["plain"]["baseline"], rows["--checkpoint turn:1"]["baseline"]
    per_turn = (ckpt["seconds"] - plain["seconds"]) / total
    print(f"checkpoint cost: {per_turn:.2f} s per turn (undisturbed run, {total} checkpoints)")
    print(
        f"stored in S3 at the end of the killed run's last attempt: {rows['--checkpoint turn:1']['killed']['bytes']:,} bytes"
    )
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
