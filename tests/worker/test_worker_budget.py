"""A worker on moto, without a fleet: its jobs never have more requests to a budgeted model
in flight than its share (protocol/budget.py, worker/budget.py's token socket), it takes a
grown share within a poll, tells the controller what it holds, and leaves at the queue's
tail (protocol/stop.py) without waiting out idle_timeout."""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

from ct_fleet.protocol import decode_reports
from ct_fleet.protocol.budget import BUDGET_REPORT, Budget, ModelBudget
from ct_fleet.services import budget as budget_store
from ct_fleet.services import queues, session, stop, store
from ct_fleet.worker.budget import SOCKET
from ct_fleet.worker.loop import Worker, WorkerSettings
from testkit.fleet import wait_for
from testkit.workers import worker_settings

REPO = Path(__file__).resolve().parents[2]
BUCKET = "worker-budget-test"
MODEL = "openai/budgeted"


def settings(fleet_id: str, tmp: Path) -> WorkerSettings:
    return worker_settings(
        fleet_id,
        tmp / "w",
        bucket=BUCKET,
        max_concurrency=4,
        idle_timeout=600,  # far longer than any bound below
        heartbeat_interval=600,
        retry_backoff=600,  # a job that ends as a retry does not come back here
        warm_runner=False,
    )


def reports(sqs, url: str) -> list:
    found = []
    for m in queues.receive(sqs, url, max_messages=10, wait=1):
        found += decode_reports(m["Body"])[0]
    return found


class Job:
    """A job process's side of the token socket (worker/job_hook.py speaks it the same way)."""

    def __init__(self, work_dir: Path) -> None:
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.connect(os.readlink(work_dir / SOCKET))
        self.stream = self.conn.makefile("rwb", buffering=0)

    def say(self, line: str) -> None:
        self.stream.write(f"{line}\n".encode())
        assert self.stream.readline() == b"ok\n"

    def close(self) -> None:
        self.stream.close()
        self.conn.close()


def test_a_worker_holds_its_jobs_requests_to_its_share(aws_env: dict[str, str], tmp_path: Path) -> None:
    session.reset()
    fleet_id = "budget1"
    sqs, s3 = session.client("sqs"), session.client("s3")
    store.ensure_bucket(s3, BUCKET, create=True)
    q = queues.ensure_queues(sqs, fleet_id, visibility_timeout=60, max_receive_count=2)
    budget_store.put(s3, BUCKET, fleet_id, Budget(v=1, models={MODEL: ModelBudget(total=3, shares={"i-1": 1})}))
    worker = Worker(settings(fleet_id, tmp_path))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_for(lambda: (tmp_path / "w" / SOCKET).is_symlink(), timeout=30, every=0.1)
    jobs = [Job(tmp_path / "w") for _ in range(3)]
    jobs[0].say(f"acquire {MODEL}")
    jobs[2].say("acquire other/model")  # no budget: at once
    second = threading.Thread(target=jobs[1].say, args=(f"acquire {MODEL}",), daemon=True)
    second.start()
    second.join(timeout=3)
    assert second.is_alive(), "a second request got a token past a share of 1"
    assert worker.budget is not None and worker.budget.report()["waiting"] == {MODEL: 1}
    jobs[0].close()  # a job process that ends gives its token back
    second.join(timeout=10)
    assert not second.is_alive()
    # the other worker died: its share is this one's now, and a third request goes at once
    budget_store.put(s3, BUCKET, fleet_id, Budget(v=2, models={MODEL: ModelBudget(total=3, shares={"i-1": 3})}))
    wait_for(lambda: worker.budget is not None and worker.budget.share(MODEL) == 3, timeout=30, every=0.2)
    jobs[2].say(f"acquire {MODEL}")
    assert worker.budget.report()["held"] == {MODEL: 2}
    jobs[1].say(f"release {MODEL}")
    assert worker.budget.report()["held"] == {MODEL: 1}
    jobs[1].say(f"limited {MODEL}")  # a rate-limit retry, said at once for the adaptive total
    assert worker.budget.report()["limited"] == {MODEL: 1}
    # it told the controller what it read and holds (a heartbeat on each new document)
    said = [r.extra[BUDGET_REPORT]["v"] for r in reports(sqs, q.done) if r.type == "heartbeat"]
    assert 2 in said, said
    worker.end_of_run("test")  # the token server closes at once (the job loop, within a receive)
    wait_for(lambda: not (tmp_path / "w" / SOCKET).is_symlink(), timeout=30, every=0.1)


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


def test_a_jobs_rate_limits_reach_its_worker_at_once_the_sdks_own_retries_included(tmp_path: Path) -> None:
    import logging

    import anyio

    from ct_fleet.protocol.budget import ModelBudget
    from ct_fleet.worker import job_hook
    from ct_fleet.worker.budget import TokenServer, WorkerBudget

    stopping = threading.Event()
    doc = Budget(v=1, models={MODEL: ModelBudget(total=4, shares={"i-1": 2}, adaptive=True)})
    budget = WorkerBudget(doc, "i-1")
    server = TokenServer(budget, tmp_path, stopping)
    threading.Thread(target=server.serve, daemon=True).start()
    out = tmp_path / "job.eval"
    job_hook.start(out)
    try:
        anyio.run(job_hook.TOKENS.acquire, MODEL)
        # the OpenAI SDK retrying a 429 inside one call: no Inspect hook fires
        logging.getLogger("openai._base_client").info("Retrying request to %s in %f seconds", "/chat/completions", 1.0)
        assert budget.limited[MODEL] == 1  # said before the log call returned
        assert budget.allowed(MODEL) == 1 and budget.news.is_set()  # the worker cut its own share
        assert budget.held[MODEL] == 1
    finally:
        job_hook.finish(out)
        stopping.set()
    wait_for(lambda: budget.held[MODEL] == 0, timeout=10, every=0.05)  # the job's end gave its token back
    assert not (tmp_path / f"{out.name}.ratelimited").exists()  # told at once, not counted for the done report
