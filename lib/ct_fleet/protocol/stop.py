"""The end-of-run signal (schema 1): how workers learn at once that their fleet is done.

When the controller has a final outcome for every job, nothing a worker could still run
is of use, so workers should upload their logs and shut down now rather than wait out
idle_timeout on an empty queue (on EC2 that is billed time). The signal has two forms,
because they reach different workers:

- a stop message on the work queue, {"v": 1, "type": "stop", "fleet_id": ...}. Idle
  workers are long-polling that queue already, so they see it at once and at no extra
  cost. A worker that receives it sends a fresh copy before deleting it ("passing it
  on"): the one message reaches every worker in turn, and no copy is received often
  enough for SQS to move it to the dead-letter queue.
- a marker object, {fleet_id}/fleet-done.json (keys.done_marker_key), for the workers
  the message does not reach: one busy on all its slots does not receive, and one that
  boots after the end finds an empty queue. Workers look for it with one HeadObject
  every MARKER_POLL seconds (20 workers: 7,200 requests an hour, under $0.003).

The controller writes the marker, then sends the message; it deletes the marker when a
fleet starts, since a resumed fleet has work again.

Before the end, the queue's tail: once nothing is queued and no job waits out a retry's
backoff, a worker with nothing in flight has nothing left to take (unless a running job
fails and is retried, which the remaining workers, or a replacement, take). The controller
then writes a second marker, {fleet_id}/fleet-tail.json (keys.tail_marker_key), and
deletes it again if work comes back; a worker that sees it with nothing in flight leaves
at once instead of waiting out idle_timeout.
"""

from __future__ import annotations

import json
import time

STOP_SCHEMA = 1
STOP_TYPE = "stop"
MARKER_POLL = 10.0


def stop_body(fleet_id: str) -> str:
    return json.dumps({"v": STOP_SCHEMA, "type": STOP_TYPE, "fleet_id": fleet_id}, separators=(",", ":"))


def is_stop(body: str) -> bool:
    """A stop message (work messages carry no "type")."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("type") == STOP_TYPE


def marker_body(fleet_id: str, reason: str) -> str:
    return json.dumps({"v": STOP_SCHEMA, "fleet_id": fleet_id, "reason": reason, "at": time.time()})
