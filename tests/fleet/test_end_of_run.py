"""The end-of-run signal: once the controller has every result, workers leave at once
(idle ones on the stop message, busy ones on the fleet-done marker) instead of waiting
out idle_timeout. That a whole local run ends within seconds of its last result is read
from the shared run of test_local_run.py."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil

from ct_fleet.protocol import decode_reports, queue_names
from ct_fleet.protocol.stop import MARKER_POLL, is_stop
from ct_fleet.services import queues, session, stop, store
from ct_fleet.worker.loop import Worker
from ct_fleet.worker.settings import WorkerSettings
from testkit.fleet import wait_for
from testkit.workers import command_job, worker_settings

BUCKET = "end-of-run-test"
IDLE_TIMEOUT = 600  # far longer than any bound below: only the signal ends these workers


def settings(fleet_id: str, n: int, tmp: Path) -> WorkerSettings:
    return worker_settings(
        fleet_id,
        tmp / f"w{n}",
        bucket=BUCKET,
        instance_id=f"i-{n}",
        idle_timeout=IDLE_TIMEOUT,
        heartbeat_interval=30,
        retry_backoff=1,
    )


def sleeping_jobs() -> list[psutil.Process]:
    """The `sleep` processes of command jobs this test's workers run."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "sleep" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_idle_and_busy_workers_leave_on_the_signal(aws_env: dict[str, str], tmp_path: Path) -> None:
    session.reset()
    fleet_id = "endofrun1"
    sqs, s3 = session.client("sqs"), session.client("s3")
    store.ensure_bucket(s3, BUCKET, create=True)
    q = queues.ensure_queues(sqs, fleet_id, visibility_timeout=60, max_receive_count=2)
    long_job = command_job(fleet_id, "long", "sleep 600")
    queues.send_batch(sqs, q.work, [long_job.to_json()])
    # More workers than max_receive_count: a stop message received by each in turn would
    # be moved to the dead-letter queue if it were not passed on as a fresh copy.
    workers = [Worker(settings(fleet_id, n, tmp_path)) for n in range(4)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while not any(w.slots.busy() for w in workers):
        assert time.monotonic() < deadline, "no worker took the job"
        time.sleep(0.1)
    (busy,) = [w for w in workers if w.slots.busy()]
    job_procs = wait_for(sleeping_jobs, timeout=120)  # the job's process is up

    stop.announce(s3, sqs, BUCKET, fleet_id, q.work)
    signalled = time.monotonic()
    left: dict[str, float] = {}
    for w, t in zip(workers, threads, strict=True):
        t.join(timeout=MARKER_POLL + 30)
        assert not t.is_alive(), f"worker {w.settings.instance_id} did not leave"
        left[w.settings.instance_id] = time.monotonic() - signalled
    assert all(w.fleet_done.is_set() for w in workers)
    # Idle workers left on the message; the busy one on the marker, its job killed.
    assert {w.left_because for w in workers if w is not busy} == {"a stop message"}, left
    assert "marker" in busy.left_because, left
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in job_procs)
    assert queues.receive(sqs, q.dlq, wait=0) == []
    remaining = queues.receive(sqs, q.work, wait=1)
    assert any(is_stop(m["Body"]) for m in remaining)  # the last copy, left for nobody
    assert not list((tmp_path / "w0").glob("*.eval"))  # a cancelled job uploads nothing


def test_a_worker_that_boots_after_the_end_leaves_at_once(aws_env: dict[str, str], tmp_path: Path) -> None:
    session.reset()
    fleet_id = "endofrun2"
    sqs, s3 = session.client("sqs"), session.client("s3")
    store.ensure_bucket(s3, BUCKET, create=True)
    q = queues.ensure_queues(sqs, fleet_id, visibility_timeout=60, max_receive_count=2)
    stop.announce(s3, sqs, BUCKET, fleet_id, q.work)
    queues.receive(sqs, q.work, wait=1, visibility=600)  # someone else holds the message
    worker = Worker(settings(fleet_id, 0, tmp_path))
    assert worker.run() == 0  # without the marker it would wait out IDLE_TIMEOUT
    assert worker.left_because == "the fleet-done marker, at start"
    stop.clear(s3, BUCKET, fleet_id)
    assert not stop.is_done(s3, BUCKET, fleet_id)
    assert queue_names(fleet_id)["work"] in q.work


def test_a_busy_worker_is_not_idle(aws_env: dict[str, str], tmp_path: Path) -> None:
    """Idle time counts from the last job, not the last receive: a one-slot worker whose
    jobs each outlast idle_timeout runs them all, then leaves on an empty queue."""
    session.reset()
    fleet_id = "endofrun3"
    sqs, s3 = session.client("sqs"), session.client("s3")
    store.ensure_bucket(s3, BUCKET, create=True)
    q = queues.ensure_queues(sqs, fleet_id, visibility_timeout=60, max_receive_count=2)
    # Writes no log: each attempt ends as a retry, which is enough here.
    jobs = [command_job(fleet_id, f"j{n}", "sleep 3") for n in range(2)]
    queues.send_batch(sqs, q.work, [j.to_json() for j in jobs])
    worker = Worker(replace(settings(fleet_id, 0, tmp_path), idle_timeout=1, retry_backoff=600))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    done: set[str] = set()
    deadline = time.monotonic() + 120
    while len(done) < 2 and time.monotonic() < deadline:  # a receive may return only some messages
        for m in queues.receive(sqs, q.done, max_messages=10, wait=1):
            done |= {r.job_id for r in decode_reports(m["Body"])[0] if r.type == "done" and r.job_id}
    assert sorted(done) == ["j0", "j1"]
