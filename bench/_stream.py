"""The synthetic stream of bench/controller_throughput.py: what a fleet's workers leave for
the controller, without the workers.

- `plan()`: a fleet of N jobs (toyarena's four smoke samples x ceil(N/4) epochs, the real
  planner's job ids), with the embedded cloud's knobs.
- `seed()`: the cloud a controller finds mid-run: bucket, queues, the manifest, W worker
  instances in EC2 (moto records them; nothing runs them), and every job's result under its
  result key, as a worker uploads it.
- `report_bodies()`: each job's done report (success, its result key, its worker's timings),
  encoded as a worker's reporter sends them (`protocol.encode_reports`, `per_message` reports
  a message), with a worker heartbeat every `heartbeat_every` results.
- `Feeder`: sends the bodies to the done queue 10 a call (SendMessageBatch), holding at
  most `backlog` messages visible (give or take one check's worth): moto's SQS calls cost
  time linear in queue depth (a receive at 500 messages deep took 2.5 s here, at 20 deep
  0.1 s), and a fleet's done queue is drained as it fills, so a deep queue would measure
  moto, not the controller.

The results are real one-sample logs (split out of one real toyarena eval by _common.py),
one per job, cloned under the job's own (sample id, epoch): the controller counts a result
only when it holds its job's sample (~6 ms a clone, spread over the cores).
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import _common as c

from ct_fleet.controller.planning import FleetSpec, FleetTask, Job
from ct_fleet.controller.planning.jobs import make_jobs
from ct_fleet.protocol import DoneMessage, Ec2Config, encode_reports, result_key
from ct_fleet.services import instances, queues, store

REGION = "us-east-1"
BUCKET = "lb-fleet-results-migrated"
CODE_SHA = "0" * 40
MODEL = "mockllm/model"
SLOTS = 16  # per worker: the 500 x 16 fleet the scale section is about


def plan(n: int, *, fleet_id: str, workers: int, check_interval: int = 15) -> FleetSpec:
    """N jobs of one toyarena task, with the fleet knobs a controller of W workers has."""
    task = FleetTask(
        "toyarena", c.TASK_SPEC, "code", {"policy": "honest", "sandbox": "local"}, list(c.SMOKE_IDS), model=MODEL
    )
    epochs = math.ceil(n / len(c.SMOKE_IDS))
    jobs = make_jobs([task], epochs, code_sha=CODE_SHA, model_args={})[:n]
    cfg = replace(
        Ec2Config().for_cloud("embedded", REGION),
        bucket=BUCKET,
        max_workers=workers,
        concurrency_per_worker=SLOTS,
        check_interval=check_interval,  # AWS's default: a look at EC2 and the queues every 15 s
    )
    return FleetSpec(fleet_id, [task], jobs, MODEL, epochs, CODE_SHA, cfg, policy="honest")


def _clone_one(args: tuple[str | int, int, Path]) -> bytes:
    sid, epoch, work_dir = args
    path = work_dir / f"result-{os.getpid()}-{epoch}-{abs(hash(sid))}.eval"
    c.clone(c.templates()[str(sid)], path, str(sid), epoch)
    try:
        return path.read_bytes()
    finally:
        path.unlink()


def result_bodies(jobs: list[Job], work_dir: Path) -> list[bytes]:
    """Each job's result: a real one-sample log cloned under the job's (sample id, epoch)."""
    args = [(job.sample_id, job.epoch, work_dir) for job in jobs]
    if len(args) < 200:
        return [_clone_one(a) for a in args]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(_clone_one, args, chunksize=64))


def seed(
    clients: dict[str, Any], spec: FleetSpec, bodies: list[bytes], *, workers: int, threads: int = 16
) -> tuple[queues.FleetQueues, list[str]]:
    """Bucket, queues, manifest, W worker instances and every job's result (`bodies`, in the
    order of spec.jobs: result_bodies); (queues, instance ids)."""
    s3, sqs, ec2 = clients["s3"], clients["sqs"], clients["ec2"]
    store.ensure_bucket(s3, BUCKET, create=True)
    q = queues.ensure_queues(sqs, spec.fleet_id, visibility_timeout=600, max_receive_count=3)
    manifest = spec.manifest(launched_by="bench", enqueued=True)
    store.put_manifest(s3, BUCKET, manifest)
    ids = launch_instances(ec2, spec.fleet_id, workers) if workers else []
    keys = [result_key(spec.fleet_id, job.job_id) for job in spec.jobs]

    def put(start: int) -> None:
        for i in range(start, len(keys), threads):
            s3.put_object(Bucket=BUCKET, Key=keys[i], Body=bodies[i])

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(put, range(threads)))
    return q, ids


def launch_instances(ec2: Any, fleet_id: str, count: int) -> list[str]:
    """W instances tagged as the fleet's workers: what DescribeInstances returns on each fleet
    check. The bench's cloud has no local instance runner, so none of them runs anything."""
    image = ec2.register_image(Name=f"bench-{fleet_id}", RootDeviceName="/dev/sda1")["ImageId"]
    tags = [
        {"Key": "FleetId", "Value": fleet_id},
        {"Key": "ManagedBy", "Value": instances.MANAGED_BY},
        {"Key": "LaunchedBy", "Value": "bench"},
    ]
    ids: list[str] = []
    while len(ids) < count:
        batch = min(100, count - len(ids))
        got = ec2.run_instances(
            ImageId=image,
            InstanceType="c6i.4xlarge",
            MinCount=batch,
            MaxCount=batch,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        ids += [inst["InstanceId"] for inst in got["Instances"]]
    return ids


def report_bodies(
    spec: FleetSpec, instance_ids: list[str], *, per_message: int = 1, heartbeat_every: int = 16
) -> list[str]:
    """Every job's success report, `per_message` reports a done message, and a heartbeat
    (load 0.5: no reason to scale) after every `heartbeat_every` results."""
    workers = instance_ids or ["i-bench"]
    now = time.time()
    bodies: list[str] = []
    chunk: list[DoneMessage] = []
    for n, job in enumerate(spec.jobs):
        chunk.append(_done(spec.fleet_id, job, workers[n % len(workers)], n % SLOTS, now))
        if len(chunk) == per_message:
            bodies += encode_reports(chunk)
            chunk = []
        if heartbeat_every and (n + 1) % heartbeat_every == 0:
            worker = workers[(n // heartbeat_every) % len(workers)]
            beat = DoneMessage(
                type="heartbeat",
                fleet_id=spec.fleet_id,
                instance_id=worker,
                worker_id=worker,
                load=0.5,
                in_flight=SLOTS,
                concurrency=SLOTS,
                sent_at=now,
            )
            bodies += encode_reports([beat])
    if chunk:
        bodies += encode_reports(chunk)
    return bodies


def _done(fleet_id: str, job: Job, instance_id: str, slot: int, now: float) -> DoneMessage:
    return DoneMessage(
        type="done",
        fleet_id=fleet_id,
        instance_id=instance_id,
        worker_id=f"{instance_id}/{slot}",
        job_id=job.job_id,
        outcome="success",
        result_key=result_key(fleet_id, job.job_id),
        received_at=now - 31.0,
        started_at=now - 30.5,
        finished_at=now - 0.5,
        sent_at=now,
    )


class Feeder:
    """Sends the bodies to the done queue from a thread, 10 a call, keeping at most
    `backlog` messages visible (checked every `check_every` calls with GetQueueAttributes)."""

    def __init__(self, sqs: Any, url: str, bodies: list[str], *, backlog: int = 40, check_every: int = 3) -> None:
        self.sqs, self.url, self.bodies = sqs, url, bodies
        self.backlog, self.check_every = backlog, check_every
        self.sent = 0
        self.calls = 0
        self.waits = 0  # times the queue was at its backlog: the controller was the slower side
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Feeder":
        self.thread.start()
        return self

    def visible(self) -> int:
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"])

    def _run(self) -> None:
        try:
            for start in range(0, len(self.bodies), queues.BATCH):
                if self.calls % self.check_every == 0:
                    while self.visible() >= self.backlog:
                        self.waits += 1
                        if self.stop.wait(0.05):
                            return
                self.sent += queues.send_batch(self.sqs, self.url, self.bodies[start : start + queues.BATCH])
                self.calls += 1
                if self.stop.is_set():
                    return
        except BaseException as exc:  # reported by join(): a feeder that died must fail the bench
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"the feeder failed: {self.error!r}") from self.error
