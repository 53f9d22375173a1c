"""A --checkpoint job's checkpoints in S3, and its resume on whichever worker takes it.

Inspect does the checkpointing and the resuming; this module only puts them where every
worker can reach them. A job's Inspect writes its checkpoints to
`s3://{bucket}/{fleet}/checkpoints/{job}/` (CheckpointConfig.checkpoints_location), and
its started log, which holds what `eval_retry` needs besides them, is copied there as soon
as Inspect has written it. The next attempt of the job (a redelivery after a lost worker,
a retry, a resumed run), on any worker, finds that log and resumes the sample from its
last committed checkpoint with Inspect's own `eval_retry`; with no log there, or one with
no committed checkpoint, the sample starts fresh, and the job's stderr says which. So it
does when the checkpoint cannot be used (the retry fails in Inspect's checkpoint code
before the checkpoint is restored, e.g. its hydrate finds a commit marker without its
snapshot): the job's checkpoints are dropped and it runs again from the start, saying
why. A resume never turns a fresh start into a failed sample.

Only the last attempt is kept: once the new attempt's log is stored (Inspect copied the
old attempt's checkpoint dirs into its own before writing it), the old attempt's log and
checkpoints are deleted, and so is its staging in Inspect's cache if it ran on this
machine (a copy of its restic repositories, with their password; a job drops its own
when it ends). When the job's result is stored the worker deletes the job's
checkpoints (unless the checkpoint config says `retention: retain`).

A checkpoint that fails fails the sample (max_consecutive_failures=0 unless the config
sets it): a sample that ran unprotected must not read as a protected success.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .. import restic
from ..protocol import WorkMessage
from ..protocol.keys import checkpoints_prefix
from ..services import session, store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# The job's checkpoint location, from the worker to the job's process (its entry reads it).
CHECKPOINTS_ENV: Final = "CT_CHECKPOINTS"
LOG_SUFFIX: Final = ".eval"
CKPT_SUFFIX: Final = ".checkpoints/"


def wanted(job: WorkMessage) -> bool:
    return job.kind != "command" and bool(job.inspect_options.get("checkpoint"))


def retained(job: WorkMessage) -> bool:
    """The checkpoint config file asks to keep them (Inspect's `retention: retain`)."""
    value = job.inspect_options.get("checkpoint")
    return isinstance(value, dict) and (value.get("checkpoint_file") or {}).get("retention") == "retain"


def location(bucket: str, fleet_id: str, job_id: str) -> str:
    return f"s3://{bucket}/{checkpoints_prefix(fleet_id, job_id)}".rstrip("/")


def _split(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix.rstrip("/") + "/"


def delete(s3: S3Client, url: str) -> int:
    bucket, prefix = _split(url)
    return store.delete_prefix(s3, bucket, prefix)


@dataclasses.dataclass
class Plan:
    url: str
    config: Any  # Inspect's CheckpointConfig, pointed at url
    prior: Path | None  # a local copy of the last attempt's started log, to resume from
    prior_name: str | None


def note(text: str) -> None:
    print(f"ct-fleet job: {text}", file=sys.stderr, flush=True)


def sandbox_type(spec: Any) -> str | None:
    """The type of a sandbox spec as Inspect takes it (a type name, (type, config), a spec)."""
    if spec is None or isinstance(spec, str):
        return spec
    if isinstance(spec, tuple | list):
        return str(spec[0]) if spec else None
    return getattr(spec, "type", None)


def local_sandbox_default(config: Any, task: Any, sample_id: Any, override: Any) -> Any:
    """The config, with nothing of the sample's `local` sandbox captured unless it says
    what to capture: Inspect would back up the default user's home, which for `local` is
    the worker machine's own (the venv, caches, every other job's files)."""
    sample = next((s for s in getattr(task, "dataset", None) or [] if str(s.id) == str(sample_id)), None)
    spec = override or getattr(sample, "sandbox", None) or task.sandbox
    # sandbox_paths is taken whole from the closest layer that sets it (eval > sample > task);
    # a config file without it reads as {}.
    layers = (config, getattr(task, "checkpoint", None), getattr(sample, "checkpoint", None))
    if sandbox_type(spec) != "local" or any(getattr(c, "sandbox_paths", None) for c in layers):
        return config
    note("the sample's sandbox is local: nothing of it is captured (sandbox_paths: {default: []})")
    return dataclasses.replace(config, sandbox_paths={"default": []})


def plan(url: str, config: Any, scratch: Path) -> Plan:
    """Make restic available without a download, point the config at `url`, and fetch the
    last attempt's started log (if any) to `scratch`."""
    restic.provide(restic.find(None))
    failures = 0 if config.max_consecutive_failures is None else config.max_consecutive_failures
    config = dataclasses.replace(config, checkpoints_location=url, max_consecutive_failures=failures)
    s3 = session.client("s3")
    bucket, prefix = _split(url)
    logs = sorted(
        k for k in store.list_keys(s3, bucket, prefix) if k.endswith(LOG_SUFFIX) and "/" not in k[len(prefix) :]
    )
    if not logs:
        note("no checkpoint of an earlier attempt: starting the sample fresh")
        return Plan(url, config, None, None)
    name = logs[-1][len(prefix) :]
    scratch.mkdir(parents=True, exist_ok=True)
    local = scratch / name
    s3.download_file(bucket, logs[-1], str(local))
    return Plan(url, config, local, name)


def resume_log(plan: Plan, task_file: str | None) -> Any:
    """The prior attempt's log to hand eval_retry, or None when it cannot resume (and why
    is said). Its task file is this worker's: the code may sit elsewhere on each machine."""
    from inspect_ai.log import read_eval_log

    if plan.prior is None:
        return None
    try:
        log = read_eval_log(str(plan.prior), header_only=True)
    except Exception as exc:
        note(f"the earlier attempt's log does not read ({exc!r}): starting the sample fresh")
        return None
    if log.status != "started":
        note(f"the earlier attempt's log is {log.status}, not started: starting the sample fresh")
        return None
    if task_file and log.eval.task_file:
        log.eval.task_file = task_file
    note(f"resuming from the last committed checkpoint of attempt {plan.prior_name}")
    return log


def is_resume_event(event: Any) -> bool:
    """Is this Inspect's resume event (the sample's checkpoint restored)?"""
    return bool(
        event.event == "info"
        and getattr(event, "source", None) == "checkpoint"
        and (event.data or {}).get("event") == "resume"
    )


def _resumed(sample: Any) -> bool:
    return any(is_resume_event(e) for e in sample.events)


# Where Inspect's checkpoint machinery lives (hydrate, the resume copy): an error raised
# from there means the kept checkpoint could not be used.
CHECKPOINT_CODE: Final = "inspect_ai/util/_checkpoint/"


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "no message"


def resume_failure(logs: Any) -> str | None:
    """Why eval_retry's attempt could not use the earlier attempt's checkpoint: its sample
    (or the retry itself, before any sample) failed in Inspect's checkpoint code before the
    checkpoint was restored. None when it could: it resumed, it found no committed
    checkpoint and ran the sample fresh, or it failed for a reason of its own (a sandbox
    that did not start, say: the checkpoint stays for the next attempt)."""
    log = logs[0] if logs else None
    sample = (log.samples or [None])[0] if log is not None else None
    if sample is not None and (sample.error is None or _resumed(sample)):
        return None
    error = sample.error if sample is not None else getattr(log, "error", None)
    if error is None:
        return "the retry wrote no sample"
    return _last_line(error.message) if CHECKPOINT_CODE in (error.traceback or "") else None


def raised_in_resume(exc: BaseException) -> str | None:
    """What eval_retry raised, when it came from Inspect's checkpoint code (else None)."""
    where = "".join(traceback.format_exception(exc))
    return _last_line(f"{exc!r}") if CHECKPOINT_CODE in where else None


def start_over(plan: Plan, log_dir: Path, why: str) -> Plan:
    """After a resume that failed: drop the job's checkpoints (they cannot be used; the
    failed attempt's copy of them included) and its log, for a fresh start of the sample."""
    note(f"the checkpoint of attempt {plan.prior_name} could not be resumed ({why[:300]}): starting the sample fresh")
    delete(session.client("s3"), plan.url)
    drop_staging(log_dir)
    if plan.prior_name:
        _drop_staging_of(plan.prior_name)
    for path in log_dir.glob(f"*{LOG_SUFFIX}"):
        path.unlink()
    return Plan(plan.url, plan.config, None, None)


def drop_staging(log_dir: Path) -> None:
    """Inspect stages checkpoints bound for S3 in its cache (the restic repositories, their
    password in plain text) and never deletes them: each job drops its attempts' (those of
    the logs in LOG_DIR) when it ends, so no secret and no copy piles up on the worker."""
    for path in log_dir.glob(f"*{LOG_SUFFIX}"):
        _drop_staging_of(path.name)


def _drop_staging_of(log_name: str) -> None:
    from ..inspect_private import checkpoint_staging_dir

    shutil.rmtree(checkpoint_staging_dir(log_name), ignore_errors=True)


@contextmanager
def keep_started_log(plan: Plan, log_dir: Path) -> Iterator[None]:
    """While the eval runs: store its started log beside its checkpoints as soon as it
    reads, then drop the prior attempt's log and checkpoints (now copied into this one's)."""
    stop = threading.Event()
    thread = threading.Thread(target=_store_started, args=(plan, log_dir, stop), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def _store_started(plan: Plan, log_dir: Path, stop: threading.Event) -> None:
    from inspect_ai.log import read_eval_log

    s3 = session.client("s3")
    bucket, prefix = _split(plan.url)
    while not stop.wait(0.2):
        for path in log_dir.glob(f"*{LOG_SUFFIX}"):
            try:
                read_eval_log(str(path), header_only=True)
            except Exception:
                continue  # not written in full yet
            s3.upload_file(str(path), bucket, prefix + path.name)
            if plan.prior_name and plan.prior_name != path.name:
                base = plan.prior_name.removesuffix(LOG_SUFFIX)
                s3.delete_object(Bucket=bucket, Key=prefix + plan.prior_name)
                store.delete_prefix(s3, bucket, prefix + base + CKPT_SUFFIX)
                _drop_staging_of(plan.prior_name)  # a killed attempt's, if it ran on this machine
            return


def _resume_sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".resume.json")


def record_resume(log: Any, out: Path, restored: tuple[float, float] | None) -> None:
    """What resuming saved, beside OUT for the done report: the model calls the sample's
    checkpoint restored (its transcript's model events before the resume event: not made
    again) and its earlier attempts' seconds (RESTORED: wall, working; not spent again),
    and the calls this attempt made."""
    sample = (log.samples or [None])[0]
    if sample is None:
        return
    resumes = [i for i, e in enumerate(sample.events) if is_resume_event(e)]
    if not resumes:
        return
    models = [i for i, e in enumerate(sample.events) if e.event == "model"]
    calls = sum(1 for i in models if i < resumes[-1])
    data = {
        "calls_restored": calls,
        "seconds_restored": round(restored[0], 3) if restored else 0.0,
        "calls": len(models) - calls,
    }
    _resume_sidecar(out).write_text(json.dumps(data))


def pop_resume(out: Path) -> dict[str, Any] | None:
    """What record_resume left for OUT (removing it), None when the job did not resume."""
    return _pop_json(_resume_sidecar(out))


def _pop_json(path: Path) -> dict[str, Any] | None:
    """A sidecar's JSON, the file removed; None when there is none (or it does not read)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    return data


def _cost_sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".checkpoints.json")


def record_cost(log: Any, out: Path) -> None:
    """What the sample's checkpoints cost, beside OUT for the done report, as Inspect's
    checkpoint events say it (those of earlier attempts it resumed from included): how
    many, the seconds the agent waited for them (to the local commit; the copy to S3
    comes on top) and the bytes each added to its restic repositories."""
    sample = (log.samples or [None])[0]
    if sample is None:
        return
    events = [e for e in sample.events if e.event == "checkpoint"]
    data = {
        "count": len(events),
        "seconds": round(sum(getattr(e, "duration_ms", 0) or 0 for e in events) / 1000, 3),
        "bytes": sum(getattr(e, "size_bytes", 0) or 0 for e in events),
    }
    _cost_sidecar(out).write_text(json.dumps(data))


def pop_cost(out: Path) -> dict[str, Any] | None:
    """What record_cost left for OUT (removing it), None when the job took no checkpoint."""
    return _pop_json(_cost_sidecar(out))
