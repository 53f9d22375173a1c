"""What an attempt without a result paid for reaches its done report (worker/spent.py):
the job's Inspect hook keeps the usage of the calls made since the sample's last
committed checkpoint beside the job's output; the attempt reads it into its report when
no result will count those calls, and drops it when a result does; the worker's heartbeats
carry it, for the report of an attempt whose whole worker was lost."""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import anyio
from inspect_ai.event import Event
from inspect_ai.hooks import ModelUsageData, SampleEvent
from inspect_ai.model import ModelUsage
from pydantic import TypeAdapter

from ct_fleet.controller.fleet.lost import LostWorkers
from ct_fleet.protocol import LOST_USAGE, DoneMessage, decode_reports, encode_reports, lost_usage
from ct_fleet.worker import job_hook, spent
from ct_fleet.worker.attempt import JobAttempts
from ct_fleet.worker.slots import UNREAD, Slots, job_output
from testkit.workers import command_job, worker_settings

CHECKPOINT = {
    "event": "checkpoint",
    "checkpoint_id": 1,
    "trigger": "turn",
    "turn": 2,
    "created_at": "2026-12-06T00:00:00Z",
    "duration_ms": 800,
    "size_bytes": 24000,
    "host": {"snapshot_id": "s", "size_bytes": 24000, "duration_ms": 700},
}


def _usage(model: str, tokens: int) -> ModelUsageData:
    return ModelUsageData(
        model_name=model,
        usage=ModelUsage(input_tokens=tokens, output_tokens=1, total_tokens=tokens + 1),
        call_duration=0.1,
    )


def test_the_job_hook_keeps_the_calls_since_the_last_committed_checkpoint(tmp_path: Path) -> None:
    hooks, out = job_hook.JobHooks(), tmp_path / "job.eval"
    checkpoint = SampleEvent(
        eval_set_id=None, run_id="r", eval_id="e", sample_id="s", event=TypeAdapter(Event).validate_python(CHECKPOINT)
    )
    job_hook.start(out)
    try:
        anyio.run(hooks.on_model_usage, _usage("openai/a", 100))
        anyio.run(hooks.on_model_usage, _usage("openai/a", 50))
        assert json.loads(spent.sidecar(out).read_text())["openai/a"]["total_tokens"] == 152
        anyio.run(hooks.on_sample_event, checkpoint)  # those calls are in the checkpoint now
        assert not spent.sidecar(out).exists()
        anyio.run(hooks.on_model_usage, _usage("anthropic/b", 7))
        assert spent.pop(out) == {"anthropic/b": {"input_tokens": 7, "output_tokens": 1, "total_tokens": 8}}
        assert not spent.sidecar(out).exists() and spent.pop(out) == {}
    finally:
        job_hook.finish(out)


def test_an_attempt_without_a_result_reports_what_it_paid_for(tmp_path: Path) -> None:
    """A command job may write the file too: this one does, as a killed Inspect job's hook
    would have, and fails."""
    settings = worker_settings("spent", tmp_path, bucket="b", warm_runner=False)
    attempts = JobAttempts(settings, s3=None, warm=None, cancel=threading.Event())
    usage = {"openai/a": {"input_tokens": 40, "output_tokens": 2, "total_tokens": 42}}
    write = f"printf '%s' '{json.dumps(usage)}' > \"$CT_OUTPUT.spent.json\"; exit 3"
    attempt = attempts.run(command_job("spent", "j1", write), tmp_path / "j1.eval")
    assert attempt.outcome == "retry" and attempt.extra[LOST_USAGE] == usage
    report = attempt.report(settings, "w", command_job("spent", "j1", write), received_at=1.0, receive_count=1)
    assert lost_usage(report) == usage
    assert not spent.sidecar(tmp_path / "j1.eval").exists()


def test_lost_usage_takes_numbers_by_model_and_nothing_else() -> None:
    def report(extra: object) -> DoneMessage:
        return DoneMessage(
            type="done", fleet_id="f", instance_id="i", worker_id="w", job_id="j", extra={LOST_USAGE: extra}
        )

    assert lost_usage(report({"m": {"total_tokens": 5, "note": "x", "bad": -1, "flag": True}})) == {
        "m": {"total_tokens": 5}
    }
    for junk in (None, "x", [1], {"m": "x"}, {1: {"total_tokens": 5}}, {"m": {"total_tokens": "5"}}):
        assert lost_usage(report(junk)) == {}, junk


def test_a_heartbeat_carries_what_each_running_job_has_spent_and_a_lost_attempt_counts_it(
    aws_client, tmp_path: Path
) -> None:
    """The whole worker lost: its last heartbeat said what each job had spent since its
    last checkpoint, and the report of the lost attempt carries it."""
    usage = {"openai/a": {"input_tokens": 30, "output_tokens": 3, "total_tokens": 33}}
    slots = Slots()
    slots.take("h-unread", UNREAD, 1.0, 1)
    slots.take("h-1", "j1", 1.0, 1)
    spent.write(job_output(tmp_path, "j1"), usage)
    holding = slots.holding(tmp_path)
    assert list(holding) == ["j1"] and holding["j1"].spent == usage
    beat = DoneMessage(type="heartbeat", fleet_id="f", instance_id="i-1", worker_id="w", holding=holding)
    (decoded,), bad = decode_reports(encode_reports([beat])[0])
    assert not bad and decoded.holding["j1"].spent == usage  # it survives the wire

    sqs = aws_client("sqs")
    url = sqs.create_queue(QueueName=f"spent-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="job j1")
    (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]
    held = replace(decoded.holding["j1"], receipt_handle=message["ReceiptHandle"])
    lost = LostWorkers("f")
    lost.on_heartbeat(replace(decoded, holding={"j1": held}))
    (report,) = lost.release(sqs, url, ["i-1"], pending=lambda job_id: True)
    assert (report.outcome, report.error_class) == ("retry", "lost")
    assert lost_usage(report) == usage
