"""The worker's reporter against real SQS (moto): the first report after a quiet interval
goes at once, the next ones within the interval wait and go together (unless one must go
at once: the worker's last job in flight), and closing sends what is left. The interval here is far longer than the test: a report seen early was sent
early, never by a timer."""

from __future__ import annotations

from ct_fleet.protocol import decode_reports
from ct_fleet.services import queues, session
from ct_fleet.worker.reporter import Reporter
from testkit.messages import done

INTERVAL = 600.0


def reported(sqs, url: str, wait: int) -> list[str]:
    return [
        r.job_id or ""
        for m in queues.receive(sqs, url, max_messages=10, wait=wait)
        for r in decode_reports(m["Body"])[0]
    ]


def test_the_first_report_goes_at_once_the_rest_together_on_close(aws_env: dict[str, str]) -> None:
    session.reset()
    sqs = session.client("sqs")
    q = queues.ensure_queues(sqs, "reporter1", visibility_timeout=60, max_receive_count=2)
    queues.send_batch(sqs, q.work, ["a", "b", "c"])
    handles = [m["ReceiptHandle"] for m in queues.receive(sqs, q.work, max_messages=3, wait=5)]
    assert len(handles) == 3
    reporter = Reporter(sqs, q.done, q.work, INTERVAL)
    reporter.start()
    reporter.add(done("j1", fleet_id="reporter1"), delete=handles[0])
    assert reported(sqs, q.done, wait=20) == ["j1"]  # not an interval later
    reporter.add(done("j2", fleet_id="reporter1"), delete=handles[1])
    reporter.add(done("j3", fleet_id="reporter1"), backoff=(handles[2], 0))
    assert reported(sqs, q.done, wait=2) == []  # within the interval: held back
    reporter.close()
    assert sorted(reported(sqs, q.done, wait=5)) == ["j2", "j3"]
    # j1 and j2's work messages are deleted; j3's is visible again at once (a 0 s back-off).
    assert [m["Body"] for m in queues.receive(sqs, q.work, max_messages=10, wait=5)] == ["c"]


def test_a_report_at_once_takes_those_held_back_with_it(aws_env: dict[str, str]) -> None:
    session.reset()
    sqs = session.client("sqs")
    q = queues.ensure_queues(sqs, "reporter2", visibility_timeout=60, max_receive_count=2)
    reporter = Reporter(sqs, q.done, q.work, INTERVAL)
    reporter.start()
    try:
        reporter.add(done("j1", fleet_id="reporter1"))
        assert reported(sqs, q.done, wait=20) == ["j1"]
        reporter.add(done("j2", fleet_id="reporter1"))
        assert reported(sqs, q.done, wait=2) == []  # within the interval: held back
        reporter.add(done("j3", fleet_id="reporter1"), at_once=True)  # the last job in flight: nothing to wait for
        assert sorted(reported(sqs, q.done, wait=20)) == ["j2", "j3"]
        reporter.add(done("j4", fleet_id="reporter1"))
        assert reported(sqs, q.done, wait=2) == []  # the hurry was for j3 only
    finally:
        reporter.close()
    assert reported(sqs, q.done, wait=5) == ["j4"]
