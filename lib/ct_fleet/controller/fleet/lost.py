"""A lost worker's jobs go back on the queue at once, not after the visibility timeout.

SQS hides a received message until its visibility timeout lapses, and only a receipt
handle of that receive can change it; the worker holding the job has the handle, and a
worker that is gone (spot reclaim, crash, its job loop killed) keeps it hidden for up to
visibility_timeout seconds (minutes, for long agent samples). So each worker's heartbeat
lists the jobs it runs with their handles (protocol.Held), and when the pool sees that
worker's instance gone the controller makes those messages visible again: the next
worker takes the job, and a --checkpoint job resumes from its last checkpoint there.

The lost attempt is then reported as a "retry" of error class "lost" through the same
path as a worker's own reports: it is counted with the run's attempts, shown with the
failed attempts, and the next attempt counts as a redelivery. Its model usage since its
last checkpoint, as the worker's last heartbeat said it (worker/spent.py), counts in the
run's tokens and cost. A handle that no longer
works (the job ended, or another worker received it since) releases nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from ...protocol import LOST, LOST_USAGE, DoneMessage, Held

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class LostWorkers:
    def __init__(self, fleet_id: str) -> None:
        self.fleet_id = fleet_id
        self.holding: dict[str, dict[str, Held]] = {}  # instance -> its jobs, as its last heartbeat said
        self.gone: set[str] = set()
        self.released = 0

    def on_heartbeat(self, msg: DoneMessage) -> None:
        if msg.instance_id not in self.gone:
            self.holding[msg.instance_id] = dict(msg.holding)

    def release(
        self, sqs: SQSClient, work_url: str, ended: Iterable[str], pending: Callable[[str], bool]
    ) -> list[DoneMessage]:
        """Put the jobs of the `ended` instances that are still `pending` back on the queue;
        the reports of their lost attempts."""
        reports = []
        for instance in ended:
            self.gone.add(instance)
            for job_id, held in sorted(self.holding.pop(instance, {}).items()):
                if not pending(job_id):
                    continue
                try:
                    sqs.change_message_visibility(
                        QueueUrl=work_url, ReceiptHandle=held.receipt_handle, VisibilityTimeout=0
                    )
                except ClientError:
                    continue  # deleted, or received again by another worker: not this one's to release
                self.released += 1
                now = time.time()
                reports.append(
                    DoneMessage(
                        type="done",
                        fleet_id=self.fleet_id,
                        instance_id=instance,
                        worker_id=f"{instance}/lost",
                        job_id=job_id,
                        outcome="retry",
                        receive_count=held.receive_count,
                        received_at=held.received_at or None,
                        started_at=held.received_at or None,
                        finished_at=now,
                        error_class=LOST,
                        error=f"worker {instance} was lost while it ran the job: put back on the queue at once",
                        sent_at=now,
                        # what the attempt had paid for, as the worker's last heartbeat said
                        extra={LOST_USAGE: held.spent} if held.spent else {},
                    )
                )
        return reports
