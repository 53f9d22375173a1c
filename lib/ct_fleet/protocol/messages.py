"""Queue messages between the controller and workers (schema version 2).

A work message is one self-contained job. A done message reports one attempt at a job
(final or not) or a worker heartbeat; workers send their reports in batches, several in
one SQS message ({"type": "batch", "reports": [...]}), so that a fleet's SQS calls grow
with time rather than with jobs. Unknown fields are ignored so that either side can add
fields without breaking the other; a change of meaning bumps SCHEMA.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, TypeVar

from pydantic import TypeAdapter, ValidationError

SCHEMA = 2
# SQS's default MaximumMessageSize (the queues are created with it), which is also the
# most one SendMessageBatch call may carry in all.
MAX_MESSAGE_BYTES = 256 * 1024

# Outcomes of one attempt. "success" and "sample_error" are final and leave a result in S3,
# "failed" is final without one (a timeout), "skipped_duplicate" means the result was
# already there, and "retry" means the work message stays for another attempt.
Outcome = Literal["success", "sample_error", "failed", "retry", "skipped_duplicate"]

# Error classes of failed attempts and dead-lettered jobs: infra, model_api, task_error, timeout,
# and fatal: a failure retrying cannot fix (authentication, unknown model, bad request, an
# import error), reported at once as a final "failed" outcome instead of being retried.
FATAL = "fatal"


class BadMessage(ValueError):
    """A queue body that is not a message of this protocol: anyone holding the worker role
    can put anything on the queues, so a reader counts it and moves on, never crashes."""


M = TypeVar("M")


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def _from_dict(cls: type[M], data: object) -> M:
    """One message, its fields checked against their types (unknown fields ignored)."""
    if not isinstance(data, dict):
        raise BadMessage(f"expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    try:
        message: M = _adapter(cls).validate_python({k: v for k, v in data.items() if k in names})
        return message
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        raise BadMessage(f"{where}: {first.get('msg', 'invalid')}") from None


def _loads(body: str | bytes) -> object:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise BadMessage("not JSON") from None


# Where a work message's task_spec is read from on the worker: "code" (relative to the
# code root, like examples/settings/toyarena/task.py@toyarena), "extra" (relative to the
# directory holding the --extra-src trees: <basename>/<path>.py@name), "setting" (relative
# to the package directory of the job's setting), or "registry" (an Inspect task name
# registered by an installed package or by importing the job's setting).
TaskRoot = Literal["code", "extra", "setting", "registry"]


@dataclass(frozen=True)
class WorkMessage:
    fleet_id: str
    job_id: str
    sample_id: str | int  # the task's own id, with its type (JSON keeps ints as ints)
    epoch: int
    task_spec: str
    task_args: dict[str, Any]
    model: str
    code_sha: str
    result_key: str
    # Inspect's per-sample time limit, only when the user set one (None: the task's own).
    time_limit: int | None
    kind: Literal["inspect", "command"] = "inspect"
    command: str | None = None
    setting: str | None = None  # imported before the task is loaded (it may register it)
    sandbox: str | None = None  # module:type of an external sandbox, imported on the worker
    task_root: TaskRoot = "code"
    model_args: dict[str, Any] = field(default_factory=dict)
    inspect_options: dict[str, Any] = field(default_factory=dict)  # Inspect's eval options (manifest.py)
    kill_after: int | None = None  # seconds before the worker kills the job (class timeout)
    v: int = SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> "WorkMessage":
        """Raises BadMessage when the body is not a work message."""
        return _from_dict(cls, _loads(body))


@dataclass(frozen=True)
class Held:
    """A job a worker is running, as its heartbeat tells it: the receipt handle of its work
    message (only the receiver's handle can change a message's visibility), so that the
    controller can put the job back on the queue at once when the worker is lost, and the
    model usage the attempt has paid for since its last checkpoint (worker/spent.py), which
    the lost attempt's report then carries."""

    receipt_handle: str
    receive_count: int = 1
    received_at: float = 0.0
    spent: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Resumed:
    """A done report's extra["resume"]: its sample resumed from an earlier attempt's
    checkpoint (worker/checkpoints.py). calls_restored: model calls the checkpoint held
    (not made again); seconds_restored: the sample's earlier attempts' wall time it held
    (not spent again); calls: this attempt's."""

    calls_restored: int = 0
    seconds_restored: float = 0.0
    calls: int = 0

    @classmethod
    def of(cls, report: DoneMessage) -> Resumed | None:
        """The report's resume, None when it has none (or a malformed one)."""
        data = report.extra.get("resume")
        if data is None:
            return None
        try:
            return _from_dict(cls, data)
        except BadMessage:
            return None


# Error class of an attempt the controller ends for a worker it saw gone (fleet/lost.py).
LOST = "lost"
# Done report extra: the model usage, by model, that an attempt without a result paid for
# (worker/spent.py): counted in the run's tokens and model cost.
LOST_USAGE = "lost_usage"


def lost_usage(report: DoneMessage) -> dict[str, dict[str, float]]:
    """The model usage a report says its attempt paid for without a result: numbers only,
    by model; {} when it has none (or a malformed one)."""
    data = report.extra.get(LOST_USAGE)
    out: dict[str, dict[str, float]] = {}
    for model, usage in data.items() if isinstance(data, dict) else ():
        if isinstance(model, str) and isinstance(usage, dict):
            numbers = {
                k: v
                for k, v in usage.items()
                if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            }
            if numbers:
                out[model] = numbers
    return out


@dataclass(frozen=True)
class DoneMessage:
    type: Literal["done", "heartbeat"]
    fleet_id: str
    instance_id: str
    worker_id: str
    job_id: str | None = None
    outcome: Outcome | None = None
    result_key: str | None = None
    receive_count: int = 1
    received_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error_class: str | None = None
    error: str | None = None
    # heartbeat fields: the controller scales on load and sees rate-limit pressure
    load: float | None = None
    in_flight: int | None = None
    concurrency: int | None = None
    holding: dict[str, Held] = field(default_factory=dict)  # job id -> its work message, while it runs
    sent_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    v: int = SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> "DoneMessage":
        """Raises BadMessage when the body is not a report."""
        return _from_dict(cls, _loads(body))


# Reports per SQS message: well under SQS's 256 KB with errors trimmed to 2,000 characters.
REPORTS_PER_MESSAGE = 25


def encode_reports(reports: list[DoneMessage]) -> list[str]:
    """Message bodies carrying the reports, up to REPORTS_PER_MESSAGE each."""
    bodies = []
    for start in range(0, len(reports), REPORTS_PER_MESSAGE):
        chunk = reports[start : start + REPORTS_PER_MESSAGE]
        bodies.append(
            json.dumps({"v": SCHEMA, "type": "batch", "reports": [asdict(r) for r in chunk]}, separators=(",", ":"))
        )
    return bodies


def decode_reports(body: str) -> tuple[list[DoneMessage], list[str]]:
    """The reports in one done-queue message (a batch, or a single report), and why each
    part that is not a report is not: a forged or broken part never hides the others."""
    try:
        data = _loads(body)
        if not isinstance(data, dict):
            raise BadMessage(f"expected a JSON object, got {type(data).__name__}")
    except BadMessage as exc:
        return [], [str(exc)]
    if data.get("type") != "batch":
        try:
            return [_from_dict(DoneMessage, data)], []
        except BadMessage as exc:
            return [], [str(exc)]
    parts = data.get("reports")
    if not isinstance(parts, list):
        return [], [f"reports: expected a list, got {type(parts).__name__}"]
    reports, problems = [], []
    for part in parts:
        try:
            reports.append(_from_dict(DoneMessage, part))
        except BadMessage as exc:
            problems.append(str(exc))
    return reports, problems
