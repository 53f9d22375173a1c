"""Policies for fault drills: the honest policy, plus a crash or a delay where a test asks.

They ship to workers inside the code artifact (the repo root is an import root there) and
are steered by environment variables the test sets on the controller, which local instances
inherit: CT_FAULT_CRASH (comma-separated sample ids, or *), CT_FAULT_DIR (markers of first
attempts), CT_FAULT_SLEEP (seconds before each sample), CT_FAULT_LEAK_MB (how much `leak`
allocates at most).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from inspect_ai.solver import Generate, Solver, TaskState, solver
from toyarena.policies import honest


def _targeted(state: TaskState) -> bool:
    wanted = os.environ.get("CT_FAULT_CRASH", "")
    return wanted == "*" or str(state.sample_id) in wanted.split(",")


def _with(before) -> Solver:
    inner = honest()

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        before(state)
        return await inner(state, generate)

    return solve


@solver
def crash_always() -> Solver:
    """A poison job: the process dies (an infrastructure error) on every attempt."""

    def before(state: TaskState) -> None:
        if _targeted(state):
            os._exit(3)

    return _with(before)


@solver
def crash_once() -> Solver:
    """Dies on the first attempt of each targeted job, succeeds on the retry."""

    def before(state: TaskState) -> None:
        if not _targeted(state):
            return
        marker = Path(os.environ["CT_FAULT_DIR"]) / f"{os.environ.get('CT_JOB_ID', state.sample_id)}.crashed"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("crashed once")
            os._exit(3)

    return _with(before)


@solver
def slow() -> Solver:
    """Takes CT_FAULT_SLEEP seconds per sample, so tests can act while jobs run."""

    def before(state: TaskState) -> None:
        time.sleep(float(os.environ.get("CT_FAULT_SLEEP", "2")))

    return _with(before)


@solver
def segfault() -> Solver:
    """The job's process dies of SIGSEGV (a crashing native extension or sandbox client)."""

    def before(state: TaskState) -> None:
        if _targeted(state):
            os.kill(os.getpid(), signal.SIGSEGV)

    return _with(before)


@solver
def hang() -> Solver:
    """Blocks the event loop for good, so Inspect's own time limit never fires (a hung sandbox)."""

    def before(state: TaskState) -> None:
        if _targeted(state):
            time.sleep(3600)

    return _with(before)


@solver
def leak() -> Solver:
    """Allocates memory until something kills the job (CT_FAULT_LEAK_MB caps it)."""

    def before(state: TaskState) -> None:
        if not _targeted(state):
            return
        held = []
        for _ in range(int(os.environ.get("CT_FAULT_LEAK_MB", "8000")) // 50):
            held.append(bytearray(50 * 2**20))  # zero-filled: resident at once
            time.sleep(0.05)

    return _with(before)
