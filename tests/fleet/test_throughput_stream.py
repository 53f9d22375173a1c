"""The driver of bench/controller_throughput.py (bench/_stream.py, bench/_controller.py):
it lays out N jobs' real results in S3 (moto over HTTP), sends N distinct done reports
that name them, and the real controller loop it drives counts exactly N, each once.
Correctness only: the bench's timings are never asserted."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import _controller  # noqa: E402  (bench/ on sys.path)
import _stream  # noqa: E402

from ct_fleet.evallog import is_readable  # noqa: E402
from ct_fleet.protocol import decode_reports, result_key  # noqa: E402
from ct_fleet.services import queues  # noqa: E402
from ct_fleet.services import session as aws  # noqa: E402

N = 37  # not a multiple of the batch sizes: the last message and the last send are part-full
WORKERS = 3


@pytest.fixture
def fleet(aws_env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    aws.reset()
    clients = {name: aws.client(name) for name in ("s3", "sqs", "ec2")}
    spec = _stream.plan(N, fleet_id=f"tput{uuid.uuid4().hex[:8]}", workers=WORKERS)
    bodies = _stream.result_bodies(spec.jobs, tmp_path)
    q, ids = _stream.seed(clients, spec, bodies, workers=WORKERS, threads=4)
    return {"clients": clients, "spec": spec, "queues": q, "instances": ids, "endpoint": aws_env["AWS_ENDPOINT_URL"]}


def test_the_stream_names_each_job_once_and_each_result_is_in_s3(fleet: dict[str, Any], tmp_path: Path) -> None:
    spec, s3 = fleet["spec"], fleet["clients"]["s3"]
    assert len(fleet["instances"]) == WORKERS
    bodies = _stream.report_bodies(spec, fleet["instances"], per_message=4, heartbeat_every=10)
    reports = [r for body in bodies for r in decode_reports(body)[0]]
    done = [r for r in reports if r.type == "done"]
    assert len(done) == N and len({r.job_id for r in done}) == N
    assert {r.job_id for r in done} == {job.job_id for job in spec.jobs}
    assert all(r.outcome == "success" and r.result_key == result_key(spec.fleet_id, r.job_id) for r in done)
    assert all(r.instance_id in fleet["instances"] for r in reports)
    assert Counter(r.type for r in reports)["heartbeat"] == N // 10
    assert max(len(decode_reports(b)[0]) for b in bodies) == 4
    for i, job in enumerate(spec.jobs):
        head = s3.head_object(Bucket=_stream.BUCKET, Key=result_key(spec.fleet_id, job.job_id))
        assert head["ContentLength"] > 1000
        if i < 3:  # a few read back in full: real one-sample logs
            out = tmp_path / f"{job.job_id}.eval"
            out.write_bytes(
                s3.get_object(Bucket=_stream.BUCKET, Key=result_key(spec.fleet_id, job.job_id))["Body"].read()
            )
            assert is_readable(out)


def test_the_controller_loop_takes_exactly_the_n_results(fleet: dict[str, Any], tmp_path: Path) -> None:
    spec, q, sqs = fleet["spec"], fleet["queues"], fleet["clients"]["sqs"]
    bodies = _stream.report_bodies(spec, fleet["instances"], per_message=3, heartbeat_every=8)
    run, warnings = _controller.collector_run(fleet["endpoint"], spec, tmp_path / "run")
    assert sorted(run.pool.launched) == sorted(fleet["instances"])  # adopted, none launched
    feeder = _stream.Feeder(sqs, q.done, bodies, backlog=6, check_every=1).start()
    try:
        why = _controller.take(run)
    finally:
        feeder.stop.set()
        feeder.join()
        run.results.close()
    assert why is None, warnings
    assert feeder.sent == len(bodies)
    assert run.state.finished == N and run.state.final == {job.job_id: "success" for job in spec.jobs}
    assert run.state.attempts == N and run.state.duplicates == 0
    run.state.check()
    local = sorted(p.stem for p in (tmp_path / "run" / "jobs").glob("*.evaljob"))
    assert local == sorted(job.job_id for job in spec.jobs)
    assert set(run.pool.worker_load) <= set(fleet["instances"])  # heartbeats reached the pool
    assert not queues.receive(sqs, q.done, wait=0)  # every report deleted
    assert warnings == []
