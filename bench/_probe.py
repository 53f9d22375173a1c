"""Run the ct-fleet CLI in this process with an observer on the controller's SQS calls.

    python bench/_probe.py RECORD.jsonl eval --task-file smoke ...   (same arguments as ct-fleet)

Used by the fleet benches, which need timestamps the controller does not persist: when
the first work message was sent, and every done report (received_at / started_at /
finished_at, stamped by the workers), one report per message or a batch of them. The observer is a botocore event hook added to
each SQS client made through ct_fleet.aws.client; the controller code is untouched.
It also times the controller's phases (code archive, embedded cloud start, account
set-up, resume, enqueue, launch, tracking, teardown, merge, cloud stop) by wrapping those
functions: {"ev": "phase", "name": ..., "t0": ..., "t1": ...}.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# lib/, and the repo root as `python -m ct_fleet.cli` run from it has (as cwd), so that
# references like bench.sleep_policy:... resolve as they do for bin/ct-fleet.
sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "lib"), str(Path(__file__).resolve().parents[1])]

from ct_fleet.services import session as aws  # noqa: E402

_lock = threading.Lock()
_out = open(sys.argv[1], "a", buffering=1)  # lives as long as the process


def _write(record: dict[str, Any]) -> None:
    with _lock:
        _out.write(json.dumps(record) + "\n")


def _before_send(params: dict[str, Any], **_: Any) -> None:
    url = params.get("QueueUrl", "")
    _write({"ev": "send", "t": time.time(), "queue": url.rsplit("-", 1)[-1], "n": len(params.get("Entries", []))})


def _after_receive(parsed: dict[str, Any], model: Any = None, **_: Any) -> None:
    now = time.time()
    for msg in parsed.get("Messages", []) or []:
        try:
            body = json.loads(msg["Body"])
        except ValueError:
            continue
        # One report per message, or several: {"type": "batch", "reports": [...]}.
        reports = body.get("reports", []) if body.get("type") == "batch" else [body]
        for report in reports:
            if report.get("type") in ("done", "heartbeat"):
                _write({"ev": "done", "t": now, "msg": report})


_original = aws.client


def _client(service: str, *args: Any, **kwargs: Any) -> Any:
    made = _original(service, *args, **kwargs)
    if service == "sqs":
        made.meta.events.register("before-parameter-build.sqs.SendMessageBatch", _before_send)
        made.meta.events.register("after-call.sqs.ReceiveMessage", _after_receive)
    return made


aws.client = _client


def _timed(owner: Any, attr: str, name: str, only: Callable[..., bool] = lambda *a, **kw: True) -> None:
    """Time each call of owner.attr (those `only` accepts) as phase `name`."""
    original = getattr(owner, attr)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not only(*args, **kwargs):
            return original(*args, **kwargs)
        t0 = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            _write({"ev": "phase", "name": name, "t0": t0, "t1": time.time()})

    setattr(owner, attr, wrapper)


def _time_phases() -> None:
    from ct_fleet.cloud.embedded import EmbeddedCloud
    from ct_fleet.controller.fleet import FleetRun, WorkerPool, tracking
    from ct_fleet.controller.fleet.collector import ResultCollector
    from ct_fleet.controller.fleet.merging import FleetMerge
    from ct_fleet.controller.planning import code

    _timed(code, "archive", "code archive")
    _timed(EmbeddedCloud, "start", "embedded cloud start")
    _timed(EmbeddedCloud, "prepare_account", "account set-up")
    _timed(EmbeddedCloud, "close", "embedded cloud stop")
    _timed(ResultCollector, "resume", "resume check")
    _timed(FleetRun, "_queue", "enqueue")
    _timed(WorkerPool, "launch", "launch")
    _timed(tracking, "track", "track")
    _timed(FleetRun, "teardown", "teardown")
    _timed(FleetMerge, "merge", "merge", only=lambda *a, **kw: not kw.get("live"))  # the end's, not the live ones


_write({"ev": "start", "t": time.time()})
_time_phases()

if __name__ == "__main__":
    from ct_fleet.cli.main import main
    from ct_fleet.exits import run_as_main

    def probed() -> None:
        try:
            main()
        finally:
            _write({"ev": "end", "t": time.time()})

    sys.argv = ["ct-fleet", *sys.argv[2:]]
    run_as_main(probed)  # and ends as `python -m ct_fleet.cli` ends
