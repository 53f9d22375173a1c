"""A worker on moto, without a fleet: it never runs more jobs of a budgeted model than its
share (protocol/budget.py), takes a grown share within a poll, tells the controller what it
holds, and leaves at the queue's tail (protocol/stop.py) without waiting out idle_timeout."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

from ct_fleet.protocol import WorkMessage, decode_reports
from ct_fleet.protocol.budget import BUDGET_REPORT, Budget, ModelBudget
from ct_fleet.services import budget as budget_store
from ct_fleet.services import queues, session, stop, store
from ct_fleet.worker.loop import Worker, WorkerSettings
from fleet_helpers import wait_for

REPO = Path(__file__).resolve().parents[1]
BUCKET = "worker-budget-test"
MODEL = "openai/budgeted"


def settings(fleet_id: str, tmp: Path) -> WorkerSettings:
    return WorkerSettings(
        fleet_id=fleet_id,
        bucket=BUCKET,
        instance_id="i-1",
        code_root=REPO,
        max_concurrency=4,
        idle_timeout=600,  # far longer than any bound below
        visibility_timeout=60,
        heartbeat_interval=600,
        retry_backoff=600,  # a job that ends as a retry does not come back here
        work_dir=tmp / "w",
        environ=dict(os.environ),
        warm_runner=False,
    )


def job(fleet_id: str, n: int, stamps: Path, model: str = MODEL) -> WorkMessage:
    # Writes no log: each attempt ends as a retry, which is enough here.
    return WorkMessage(
        fleet_id=fleet_id,
        job_id=f"j{n}",
        sample_id=n,
        epoch=1,
        task_spec="",
        task_args={},
        model=model,
        code_sha="",
        result_key=f"{fleet_id}/j{n}.eval",
        time_limit=0,
        kind="command",
        command=f"echo start $EPOCHREALTIME >> {stamps}; sleep 1.5; echo end $EPOCHREALTIME >> {stamps}",
    )


def most_at_once(stamps: Path) -> int:
    events = sorted(
        (float(t), +1 if kind == "start" else -1)
        for kind, t in (line.split() for line in stamps.read_text().splitlines())
    )
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def reports(sqs, url: str) -> list:
    found = []
    for m in queues.receive(sqs, url, max_messages=10, wait=1):
        found += decode_reports(m["Body"])[0]
    return found


def test_a_worker_runs_at_most_its_share_and_takes_a_grown_one(aws_env: dict[str, str], tmp_path: Path) -> None:
    session.reset()
    fleet_id = "budget1"
    sqs, s3 = session.client("sqs"), session.client("s3")
    store.ensure_bucket(s3, BUCKET, create=True)
    q = queues.ensure_queues(sqs, fleet_id, visibility_timeout=60, max_receive_count=2)
    doc = Budget(v=1, models={MODEL: ModelBudget(total=3, shares={"i-1": 1, "i-2": 2})})
    budget_store.put(s3, BUCKET, fleet_id, doc)
    stamps = tmp_path / "stamps"
    queues.send_batch(sqs, q.work, [job(fleet_id, n, stamps).to_json() for n in range(3)])
    worker = Worker(settings(fleet_id, tmp_path))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_for(lambda: stamps.exists() and stamps.read_text().count("end") >= 3, timeout=60, every=0.2)
    assert most_at_once(stamps) == 1  # 4 slots, a share of 1: one job at a time
    # the other worker died: its share is this one's now
    budget_store.put(s3, BUCKET, fleet_id, Budget(v=2, models={MODEL: ModelBudget(total=3, shares={"i-1": 3})}))
    wait_for(lambda: worker.budget is not None and worker.budget.share(MODEL) == 3, timeout=30, every=0.2)
    stamps.unlink()
    queues.send_batch(sqs, q.work, [job(fleet_id, n, stamps).to_json() for n in range(3, 6)])
    wait_for(lambda: stamps.exists() and stamps.read_text().count("end") >= 3, timeout=60, every=0.2)
    assert most_at_once(stamps) == 3
    # it said what it read and holds (a heartbeat on the new document)
    said = [r.extra[BUDGET_REPORT] for r in reports(sqs, q.done) if r.type == "heartbeat"]
    assert {"v": 2, "held": {MODEL: 0}} in said or any(s["v"] == 2 for s in said), said
    worker.end_of_run("test")
    thread.join(timeout=30)


def test_an_idle_worker_leaves_at_the_queues_tail(aws_env: dict[str, str], tmp_path: Path) -> None:
    session.reset()
    fleet_id = "budget2"
    sqs, s3 = session.client("sqs"), session.client("s3")
    store.ensure_bucket(s3, BUCKET, create=True)
    queues.ensure_queues(sqs, fleet_id, visibility_timeout=60, max_receive_count=2)
    stop.clear(s3, BUCKET, fleet_id)
    worker = Worker(replace(settings(fleet_id, tmp_path), idle_timeout=3))
    thread = threading.Thread(target=worker.run, daemon=True)
    stop.mark_tail(s3, BUCKET, fleet_id, True)
    started = time.monotonic()
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert worker.left_because == "the queue's tail"
    assert time.monotonic() - started < 3  # before idle_timeout
    stop.clear(s3, BUCKET, fleet_id)
    assert not stop.is_tail(s3, BUCKET, fleet_id)
