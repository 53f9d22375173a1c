#!/usr/bin/env python
"""checkpoint_sandbox_drill: a --checkpoint agent sample in a Docker sandbox, its job killed
after a few turns and run again on another "machine": is the file the agent wrote in the
container before the kill back after the resume, and what does a checkpoint of a sandbox
cost?

The sample is tests/testkit/openai_stub.py's "Take N steps of S seconds" agent (react() with bash:
N-1 calls that each append `step K` to steps.txt in the container's working directory,
/root, the default user's home that Inspect captures by default; one `cat steps.txt`; a
submit), in a container of toyarena's base image (bin/build-images; Docker running:
bin/ensure-docker start). Each attempt is the job as a worker runs it
(`python -m ct_fleet.worker.runner`) with its checkpoints in S3 (a moto server of its own),
from a directory and cache of its own; the first is SIGKILLed once K checkpoints are
committed, the second resumes in a new container. Three runs:
  without --checkpoint        the baseline: the sample's time
  --checkpoint, undisturbed   what a checkpoint costs with a sandbox: Inspect's events
  --checkpoint, killed        the resume: the last `cat steps.txt` must read every step

The drill measures; tests/fleet/test_checkpoints.py checks the file comes back (one short
killed-and-resumed attempt, not the three runs the figures need).

    .venv/bin/python bench/checkpoint_sandbox_drill.py               # 6 steps, killed after 3 checkpoints
    .venv/bin/python bench/checkpoint_sandbox_drill.py --steps 10 --kill-after 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "lib"), str(REPO / "examples" / "settings")]

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer  # noqa: E402
from ct_fleet.protocol import WorkMessage  # noqa: E402
from ct_fleet.services import session, store  # noqa: E402
from ct_fleet.worker import checkpoints  # noqa: E402

KEY = "sk-drill-" + uuid.uuid4().hex
BUCKET = "ckpt-sandbox-drill"
AGENT = """
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import bash


@task
def steps(n: int = 6, pause: float = 0.0):
    sample = Sample(id="long", input=f"Take {n} steps of {pause} seconds", target=f"step {n - 1}")
    return Task(dataset=MemoryDataset([sample], name="steps"), solver=react(tools=[bash()]), scorer=includes(), sandbox=("docker", "compose.yaml"))
"""
COMPOSE = """services:
  default:
    image: "{image}"
    pull_policy: never
    init: true
    network_mode: none
    working_dir: /root
    command: ["tail", "-f", "/dev/null"]
    stop_grace_period: 1s
    labels:
      ct-fleet.drill: "{label}"
"""


def toyarena_image() -> str:
    subprocess.run([str(REPO / "bin" / "build-images"), "toyarena"], check=True, capture_output=True, timeout=1800)
    out = subprocess.run(
        [sys.executable, "-m", "toyarena.images", "list"],
        env={**os.environ, "PYTHONPATH": str(REPO / "examples" / "settings")},
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()[0]


@dataclass
class Attempt:
    wall: float
    stderr: str
    log: Any = None  # the finished attempt's EvalLog


class Drill:
    def __init__(self, base: Path, stub_url: str, endpoint: str, image: str, steps: int) -> None:
        self.base, self.stub_url, self.endpoint, self.steps = base, stub_url, endpoint, steps
        self.label = uuid.uuid4().hex
        self.files = {"agent.py": AGENT, "compose.yaml": COMPOSE.format(image=image, label=self.label)}

    def job(self, name: str, checkpoint: bool) -> WorkMessage:
        options = {"checkpoint": {"checkpoint_file": {"trigger": {"type": "turn", "every": 1}}}} if checkpoint else {}
        return WorkMessage(
            fleet_id="drill",
            job_id=name,
            sample_id="long",
            epoch=1,
            task_spec="agent.py@steps",
            task_args={"n": self.steps, "pause": 0.0},
            model="openai-api/stubai/scripted",
            code_sha="x",
            result_key=f"drill/{name}.eval",
            time_limit=None,
            inspect_options=options,
        )

    def start(self, where: Path, job: WorkMessage) -> subprocess.Popen[bytes]:
        """The job as a worker runs it: its own process, code root and cache."""
        where.mkdir(parents=True)
        for name, text in self.files.items():
            (where / name).write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID=EMBEDDED_ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=EMBEDDED_SECRET_KEY,
            AWS_REGION="us-east-1",
            STUBAI_API_KEY=KEY,
            STUBAI_BASE_URL=self.stub_url,
            XDG_CACHE_HOME=str(where / "cache"),
            XDG_DATA_HOME=str(where / "data"),
            **{checkpoints.CHECKPOINTS_ENV: checkpoints.location(BUCKET, job.fleet_id, job.job_id)},
        )
        with open(where / "stderr", "wb") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "ct_fleet.worker.runner", job.to_json(), str(where / "out.eval")],
                cwd=where,
                env=env,
                stdout=err,
                stderr=err,
                start_new_session=True,
            )

    def attempt(self, where: Path, job: WorkMessage, kill_after: int | None = None) -> Attempt:
        from inspect_ai.log import read_eval_log

        start = time.monotonic()
        proc = self.start(where, job)
        if kill_after is not None:
            s3, prefix = session.client("s3"), f"{job.fleet_id}/checkpoints/{job.job_id}/"
            while proc.poll() is None:
                if sum("/ckpt-" in k for k in store.list_keys(s3, BUCKET, prefix)) >= kill_after:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.2)
        code = proc.wait()
        wall = time.monotonic() - start
        stderr = (where / "stderr").read_text()
        if kill_after is None and code != 0:
            raise SystemExit(f"{where.name} exited {code}:\n{stderr[-3000:]}")
        log = read_eval_log(str(where / "out.eval")) if (where / "out.eval").exists() else None
        return Attempt(wall, stderr, log)

    def clean(self) -> None:
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=ct-fleet.drill={self.label}"], capture_output=True, text=True
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def checkpoint_figures(log: Any) -> list[tuple[float, int, float, int]]:
    """Each checkpoint event's (seconds, bytes added, of which the sandbox's seconds, bytes)."""
    out = []
    for e in log.samples[0].events:
        if e.event == "checkpoint":
            boxes = getattr(e, "sandboxes", None) or {}
            box_s = sum(b.duration_ms for b in boxes.values()) / 1000
            box_b = sum(b.size_bytes for b in boxes.values())
            out.append((e.duration_ms / 1000, e.size_bytes, box_s, box_b))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--kill-after", type=int, default=3, help="committed checkpoints before the kill")
    parser.add_argument("--keep", action="store_true", help="keep the attempts' directories (printed)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ckpt-sandbox-drill-"))
    image = toyarena_image()
    server = MotoServer(log_path=base / "moto.log").start()
    stub = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "testkit" / "openai_stub.py"), "--port-file", str(base / "port")]
        + ["--log", str(base / "stub.log"), "--rate-limit-every", "0"],
        env={**os.environ, "STUB_API_KEY": KEY},
    )
    drill = None
    try:
        os.environ.update(
            AWS_ENDPOINT_URL=server.endpoint_url,
            AWS_ACCESS_KEY_ID=EMBEDDED_ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=EMBEDDED_SECRET_KEY,
            AWS_REGION="us-east-1",
        )
        store.ensure_bucket(session.client("s3"), BUCKET, create=True)
        while not (base / "port").exists() or not (base / "port").read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{(base / 'port').read_text()}/v1"
        drill = Drill(base, url, server.endpoint_url, image, args.steps)
        plain = drill.attempt(base / "plain", drill.job("plain", False))
        whole = drill.attempt(base / "ckpt", drill.job("ckpt", True))
        killed = drill.attempt(base / "killed-1", drill.job("killed", True), kill_after=args.kill_after)
        resumed = drill.attempt(base / "killed-2", drill.job("killed", True))
    finally:
        if drill is not None:
            drill.clean()
        stub.terminate()
        stub.wait()
        server.stop()
    sample = resumed.log.samples[0]
    steps_read = sample.output.completion.split()[1::2]
    expected = [str(k) for k in range(1, args.steps)]
    resumed_event = any(checkpoints.is_resume_event(e) for e in sample.events)
    t_plain, t_whole = plain.log.samples[0].total_time, whole.log.samples[0].total_time
    figures = checkpoint_figures(whole.log)
    n = len(figures)
    print(
        f"Docker sandbox ({image}), an agent of {args.steps} steps ({args.steps + 1} model calls), --checkpoint turn:1"
    )
    print(f"  without --checkpoint: sample {t_plain:.1f} s, job wall {plain.wall:.1f} s")
    print(f"  --checkpoint, undisturbed: sample {t_whole:.1f} s, job wall {whole.wall:.1f} s; {n} checkpoints")
    if n:
        print(
            f"    per checkpoint: {sum(f[0] for f in figures) / n:.2f} s to the local commit, of which the sandbox's "
            f"{sum(f[2] for f in figures) / n:.2f} s; {sum(f[1] for f in figures) / n / 1000:.1f} KB added, of which "
            f"the sandbox's {sum(f[3] for f in figures) / n / 1000:.1f} KB; "
            f"per turn against no checkpoints: {(t_whole - t_plain) / (args.steps + 1):.2f} s"
        )
    print(f"  killed after {args.kill_after} checkpoints: {killed.wall:.1f} s; the resume: {resumed.wall:.1f} s")
    print(f"    resume event: {resumed_event}; the last `cat steps.txt` read steps {' '.join(steps_read)}")
    ok = resumed_event and steps_read == expected
    print(
        f"checkpoint_sandbox_drill: the file written before the kill is {'back' if ok else 'NOT back'} after the "
        f"resume; a checkpoint of the sandboxed sample costs {sum(f[0] for f in figures) / max(n, 1):.1f} s"
    )
    if args.keep:
        print(f"kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
