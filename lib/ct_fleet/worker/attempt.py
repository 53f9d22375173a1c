"""One attempt of a job, as a process of its own: started (through the warm runner, the
runner module, or a command's bash), supervised for its time and memory, swept of what it
left running, and judged by what it wrote: a result, a sample error, or a failure that is
worth a retry or final."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..connections import one_connection
from ..evallog import problem, read_header, sample_error
from ..evallog.masking import mask_secrets
from ..protocol import LOST_USAGE, DoneMessage, WorkMessage
from ..protocol.budget import RATE_LIMITED
from ..sandbox import cleanup, digests
from . import checkpoints, failures, pressure, spent
from .inspect_job import command_env, extra_root, finish_command_output
from .settings import WorkerSettings
from .supervise import ATTEMPT_VAR, Cancel, JobProcess, PopenJob, supervise, sweep_attempt
from .warm import WarmRunner

log = logging.getLogger("ct_fleet.worker")


@dataclass
class Attempt:
    outcome: str
    error_class: str | None = None
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)  # for the done report (the images a job ran)

    def report(
        self, settings: WorkerSettings, worker_id: str, job: WorkMessage, received_at: float, receive_count: int
    ) -> DoneMessage:
        """The done report of this attempt, its error masked."""
        return DoneMessage(
            type="done",
            fleet_id=settings.fleet_id,
            instance_id=settings.instance_id,
            worker_id=worker_id,
            job_id=job.job_id,
            outcome=self.outcome,  # type: ignore[arg-type]
            result_key=job.result_key,
            receive_count=receive_count,
            received_at=received_at,
            started_at=self.started_at,
            finished_at=time.time(),
            error_class=self.error_class,
            error=failures.mask(self.error or "", failures.secret_values(settings.environ))[-2000:] or None,
            sent_at=time.time(),
            extra=self.extra,
        )


@dataclass(frozen=True)
class _Either:
    one: threading.Event
    other: threading.Event

    def is_set(self) -> bool:
        return self.one.is_set() or self.other.is_set()


class JobAttempts:
    """Runs attempts of this worker's jobs; `cancel` set (the fleet is done) ends them, and
    `notice` set (a spot interruption notice) ends those that checkpoint."""

    def __init__(self, settings: WorkerSettings, s3: Any, warm: WarmRunner | None, cancel: threading.Event) -> None:
        self.settings = settings
        self.s3 = s3
        self.warm = warm
        self.cancel = cancel
        # A checkpointed job stops at a spot notice, keeping its last committed checkpoint
        # for the attempt that takes it over: run on, it would write checkpoints that
        # attempt is reading, on an instance about to go.
        self.notice = threading.Event()
        self._checkpointing = 0
        self._checkpointing_changed = threading.Condition()
        # The fleet has a model budget: each job makes one request at a time, each with a
        # token of this worker's share (worker/budget.py).
        self.budgeted = False

    def run(self, job: WorkMessage, out: Path) -> Attempt:
        """Run one attempt of JOB (its output at OUT) to its end. One that ends without a
        result reports the model usage it paid for (spent.py); a result's log counts its own."""
        attempt = self._run(job, out)
        lost = spent.pop(out)
        if lost and attempt.outcome not in ("success", "sample_error"):
            attempt.extra = {**attempt.extra, LOST_USAGE: lost}
        return attempt

    def _run(self, job: WorkMessage, out: Path) -> Attempt:
        attempt = Attempt(outcome="success")
        token = uuid.uuid4().hex
        # The job's identity is in the environment for command templates and for
        # settings that want it (fault drills in tests key on it; compose files label
        # sandbox containers with it, for _remove_sandboxes).
        job_env = {
            "PYTHONUNBUFFERED": "1",
            "CT_FLEET_ID": job.fleet_id,
            "CT_INSTANCE_ID": self.settings.instance_id,
            ATTEMPT_VAR: token,
            **command_env(job, out, extra_root(self.settings.environ)),
        }
        cancel: Cancel = self.cancel
        if checkpoints.wanted(job):
            job_env[checkpoints.CHECKPOINTS_ENV] = checkpoints.location(self.settings.bucket, job.fleet_id, job.job_id)
            cancel = _Either(self.cancel, self.notice)
        stderr_path = out.with_suffix(".stderr")
        if self.budgeted:
            job = replace(job, inspect_options=one_connection(job.inspect_options))
        proc: JobProcess
        if job.kind != "command" and self.warm is not None:
            proc = self.warm.start(job, out, stderr_path, job_env)
        else:
            if job.kind == "command":
                # A command job needs no Python of its own: run the template directly.
                cmd = ["bash", "-c", job.command or ""]
            else:
                cmd = [sys.executable, "-m", "ct_fleet.worker.runner", job.to_json(), str(out)]
            with open(stderr_path, "wb") as err:
                popen = subprocess.Popen(
                    cmd, cwd=self.settings.code_root, env={**self.settings.environ, **job_env}, stdout=err, stderr=err
                )
            proc = PopenJob(popen)
        # The kill timeout is the fleet's sample_time_limit (kill_after), set or not; Inspect
        # is told a time limit only when the user set one (time_limit).
        limit = job.kill_after * 1.5 + self.settings.kill_grace if job.kill_after else None
        with self._running(checkpointed=cancel is not self.cancel):
            ended = supervise(
                proc, time_limit=limit, memory_limit_mb=self.settings.job_memory_mb or None, cancel=cancel
            )
        swept = sweep_attempt(token, attempt.started_at)
        if swept:
            log.info("job %s: killed %d process(es) it left running (%s)", job.job_id, len(swept), swept[:10])
        if ended.killed:
            self._remove_sandboxes(job)
            return Attempt("failed", ended.killed, ended.detail, attempt.started_at)
        code = ended.code
        images = digests.pop_sidecar(out)
        attempt.extra = {"images": images} if images else {}
        limited = pressure.pop(out)
        if limited:
            attempt.extra.update({RATE_LIMITED: limited, "model": job.model})
        resumed = checkpoints.pop_resume(out)
        if resumed:
            attempt.extra["resume"] = resumed  # what resuming from a checkpoint saved
        cost = checkpoints.pop_cost(out)
        if cost:
            attempt.extra["checkpoints"] = cost  # what checkpointing cost
        secrets = failures.secret_values(self.settings.environ)
        output = self._masked_stderr(stderr_path, secrets)[-20000:]
        if code == 0 and job.kind == "command" and out.exists():
            try:
                finish_command_output(job, out)
            except (OSError, ValueError) as exc:
                return Attempt("failed", "fatal", f"command log cannot be relabelled: {exc}", attempt.started_at)
        if code != 0:
            self._remove_sandboxes(job)
            text = failures.tail(output, secrets)
            # A command's exit status is its own, not the runner's (failures.TASK_FAILED).
            cls, why = (failures.classify(text), "") if job.kind == "command" else failures.classify_exit(code, output)
            outcome = "failed" if cls == "fatal" else "retry"
            # The line that says why goes last: the controller shows an error's last line.
            said = f"{text}\n{why}" if why and not text.endswith(why) else text
            return Attempt(outcome, cls, f"runner exit {code}: {said}", attempt.started_at)
        header = read_header(out)
        if header is None:
            return Attempt("retry", "infra", "runner left no finished log", attempt.started_at)
        error = sample_error(header)
        unreadable = problem(out)
        if unreadable is not None:
            # Not a result the controller could count: retried, and dead-lettered if it persists.
            detail = f"; the eval's error: {error}" if error else ""
            return Attempt(
                "retry",
                "infra",
                f"runner left a log that does not read in full: {unreadable}{detail}",
                attempt.started_at,
            )
        held = mask_secrets(out, secrets)
        if held:
            log.warning("job %s: secret values masked in its log (%s)", job.job_id, ", ".join(held)[:300])
        if error is not None:
            error = failures.mask(error, secrets)
            if failures.RATE_LIMIT.search(error):
                return Attempt("retry", "model_api", error, attempt.started_at)
            return Attempt("sample_error", "task_error", error, attempt.started_at, attempt.extra)
        return attempt

    @contextlib.contextmanager
    def _running(self, *, checkpointed: bool) -> Iterator[None]:
        step = 1 if checkpointed else 0
        with self._checkpointing_changed:
            self._checkpointing += step
        try:
            yield
        finally:
            with self._checkpointing_changed:
                self._checkpointing -= step
                self._checkpointing_changed.notify_all()

    @property
    def checkpointing(self) -> int:
        """How many checkpointed jobs run now."""
        with self._checkpointing_changed:
            return self._checkpointing

    def stop_checkpointed(self, timeout: float) -> bool:
        """At a spot notice: end every checkpointed job, and wait (at most `timeout` s)
        until none runs, so that none writes a checkpoint once its job is released."""
        self.notice.set()
        with self._checkpointing_changed:
            return self._checkpointing_changed.wait_for(lambda: self._checkpointing == 0, timeout)

    def drop_checkpoints(self, job: WorkMessage) -> None:
        """The job's result is stored: its checkpoints (and restic passwords) go, unless kept."""
        if not checkpoints.wanted(job) or checkpoints.retained(job):
            return
        try:
            checkpoints.delete(self.s3, checkpoints.location(self.settings.bucket, job.fleet_id, job.job_id))
        except Exception:
            log.exception("could not delete the checkpoints of job %s; teardown removes them", job.job_id)

    def _masked_stderr(self, path: Path, secrets: list[str]) -> str:
        """The job's stderr with the secrets masked, in the file too: it outlives the job on disk."""
        text = path.read_text(errors="replace")
        masked = failures.mask(text, secrets)
        if masked != text:
            path.write_text(masked)
        return masked

    def _remove_sandboxes(self, job: WorkMessage) -> None:
        """A runner that was killed or died cannot tear its Docker sandboxes down: do it."""
        try:
            removed = cleanup.remove_sandboxes(job=job.job_id, instance=self.settings.instance_id, fleet=job.fleet_id)
        except Exception:
            log.exception("could not remove the sandboxes of job %s", job.job_id)
            return
        if removed:
            log.info("job %s: removed its leftover sandboxes %s", job.job_id, ", ".join(removed))
