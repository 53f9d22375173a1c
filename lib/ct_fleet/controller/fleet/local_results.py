"""The controller's local copies of results (runs/<fleet>/jobs/<job>.evaljob) and proof
that each still reads in full.

A result counts once it is verified (evallog.verify: header and sample read in full).
Its digest is kept then, so the check before the merge reads every file once more but
inflates only those whose bytes changed since (a disk fault, a stray edit).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from ...evallog import digest, problem
from ...protocol import run_layout


class LocalResults:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._digests: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def path(self, job_id: str) -> Path:
        return run_layout.job_log(self.run_dir, job_id)

    def verify(self, job_id: str, expect: tuple[str | int, int] | None = None, task: str | None = None) -> str | None:
        """None (and the file's digest kept) when the local copy reads in full (and holds the
        `expect`ed sample and epoch of `task`), else the problem."""
        path = self.path(job_id)
        if not path.is_file():
            return "no local copy"
        found = problem(path, expect, task)
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
