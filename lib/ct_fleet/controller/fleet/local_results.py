"""The controller's local copies of results (runs/<fleet>/jobs/<job>.evaljob) and proof
that each still reads in full.

A result counts once it is verified (evallog.verify: header and sample read in full).
Its digest is kept then, so the check before the merge reads every file once more but
inflates only those whose bytes changed since (a disk fault, a stray edit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from ...evallog import Expected, digest, problem
from ...protocol import run_layout


class _Job(Protocol):
    @property
    def sample_id(self) -> str | int: ...
    @property
    def epoch(self) -> int: ...


class _Task(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def task_args(self) -> dict[str, Any]: ...


def expected_result(model: str, job: _Job, task: _Task) -> Expected:
    """What a job's result must be: a log of its task, with the task's model (the fleet's,
    in a manifest from before the grid) and arguments, holding just its sample and epoch."""
    return Expected(job.sample_id, job.epoch, task.name, task.model or model, task.task_args)


class LocalResults:
    def __init__(self, run_dir: Path, expected: Callable[[str], Expected] | None = None) -> None:
        self.run_dir = run_dir
        self._expected = expected  # job id -> what its result must be (checked again before the merge)
        self._digests: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def path(self, job_id: str) -> Path:
        return run_layout.job_log(self.run_dir, job_id)

    def verify(self, job_id: str) -> str | None:
        """None (and the file's digest kept) when the local copy reads in full and is the
        job's result, else the problem."""
        path = self.path(job_id)
        if not path.is_file():
            return "no local copy"
        found = problem(path, self._expected(job_id) if self._expected else None)
        if found is None:
            self.remember(job_id)
        return found

    def remember(self, job_id: str, known: bytes | None = None) -> None:
        """The local copy was just verified (by the download, which says its digest): keep it."""
        value = digest(self.path(job_id)) if known is None else known
        with self._lock:
            self._digests[job_id] = value

    def damaged(self, job_ids: Iterable[str]) -> dict[str, str]:
        """Job id -> problem, for the local copies that changed since they were verified and no longer read."""
        out = {}
        for job_id in job_ids:
            path = self.path(job_id)
            with self._lock:
                known = self._digests.get(job_id)
            try:
                if known is not None and digest(path) == known:
                    continue
            except OSError:
                pass
            found = self.verify(job_id)
            if found is not None:
                out[job_id] = found
        return out
