"""Policies for fault drills: the honest policy, plus a crash or a delay where a test asks.

They ship to workers inside the code artifact (the repo root is an import root there) and
are steered by environment variables the test sets on the controller, which local instances
inherit: CT_FAULT_CRASH (comma-separated sample ids, or *), CT_FAULT_DIR (markers of first
attempts), CT_FAULT_SLEEP (seconds before each sample), CT_FAULT_LEAK_MB (how much `leak`
allocates at most), CT_FAULT_DRILL (which fault `drill` injects into which sample),
CT_FAULT_GATE and CT_FAULT_FREE (the file `gated` jobs wait for, and how many run without).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


def _targeted_only(fault):
    def before(state: TaskState) -> None:
        if _targeted(state):
            fault(state)

    return before


# The faults, each done to the sample it is called for.


def _crash(state: TaskState) -> None:
    os._exit(3)


def _crash_once(state: TaskState) -> None:
    marker = Path(os.environ["CT_FAULT_DIR"]) / f"{os.environ.get('CT_JOB_ID', state.sample_id)}.crashed"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("crashed once")
        os._exit(3)


def _sleep(state: TaskState) -> None:
    time.sleep(float(os.environ.get("CT_FAULT_SLEEP", "2")))


def _segfault(state: TaskState) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _hang(state: TaskState) -> None:
    # A process of the job's own, as a sandbox command is: it must not outlive the job.
    subprocess.Popen(["sleep", "3600"])
    time.sleep(3600)


def _leak(state: TaskState) -> None:
    held = []
    for _ in range(int(os.environ.get("CT_FAULT_LEAK_MB", "8000")) // 50):
        held.append(bytearray(50 * 2**20))  # zero-filled: resident at once
        time.sleep(0.05)


def _wait_at_the_gate(state: TaskState) -> None:
    """The first CT_FAULT_FREE jobs to get here go on; the others wait until the file
    CT_FAULT_GATE exists (the test opens it once it has done what needs jobs running)."""
    where = Path(os.environ["CT_FAULT_DIR"])
    where.mkdir(parents=True, exist_ok=True)
    for slot in range(int(os.environ.get("CT_FAULT_FREE", "0"))):
        try:
            os.close(os.open(where / f"free-{slot}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return
        except FileExistsError:
            continue
    gate, deadline = Path(os.environ["CT_FAULT_GATE"]), time.monotonic() + 1800
    while not gate.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gate {gate} was never opened")
        time.sleep(0.1)


def _print_secrets_and_crash(state: TaskState) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GH_TOKEN"):
        if os.environ.get(name):
            print(f"debug: {name}={os.environ[name]}", file=sys.stderr, flush=True)
    os._exit(3)


def _crash_once_then_error_with_secrets(state: TaskState) -> None:
    """A task whose error quotes the keys it can see (after one crash, like its neighbours)."""
    _crash_once(state)
    keys = " ".join(f"{name}={os.environ[name]}" for name in ("ANTHROPIC_API_KEY", "GH_TOKEN") if os.environ.get(name))
    raise RuntimeError(f"cannot log in with {keys}")


@solver
def crash_always() -> Solver:
    """A poison job: the process dies (an infrastructure error) on every attempt."""
    return _with(_targeted_only(_crash))


@solver
def crash_once() -> Solver:
    """Dies on the first attempt of each targeted job, succeeds on the retry."""
    return _with(_targeted_only(_crash_once))


@solver
def slow() -> Solver:
    """Takes CT_FAULT_SLEEP seconds per sample, so tests can act while jobs run."""
    return _with(_sleep)


@solver
def gated() -> Solver:
    """Jobs that hold on until the test opens their gate (CT_FAULT_GATE, CT_FAULT_FREE): a
    test acts on running jobs, or on a run with work left, without racing their end."""
    return _with(_wait_at_the_gate)


@solver
def segfault() -> Solver:
    """The job's process dies of SIGSEGV (a crashing native extension or sandbox client)."""
    return _with(_targeted_only(_segfault))


@solver
def hang() -> Solver:
    """Blocks the event loop for good, so Inspect's own time limit never fires (a hung sandbox)."""
    return _with(_targeted_only(_hang))


@solver
def leak() -> Solver:
    """Allocates memory until something kills the job (CT_FAULT_LEAK_MB caps it)."""
    return _with(_targeted_only(_leak))


@solver
def crash_leaking_secrets() -> Solver:
    """A careless job: prints the secrets it can see, then dies (its stderr reaches the report)."""
    return _with(_targeted_only(_print_secrets_and_crash))


FAULTS = {
    "crash_always": _crash,
    "crash_once": _crash_once,
    "slow": _sleep,
    "gated": _wait_at_the_gate,
    "segfault": _segfault,
    "hang": _hang,
    "leak": _leak,
    "crash_leaking_secrets": _print_secrets_and_crash,
    "crash_once_then_error_with_secrets": _crash_once_then_error_with_secrets,
}


@solver
def drill() -> Solver:
    """Several of the faults above in one run, chosen per sample: CT_FAULT_DRILL maps sample
    ids to the names of the policies above, `web:fix_login=crash_leaking_secrets,*=crash_once`
    (`*`: every other sample; a sample mapped to nothing runs honestly). Drills that only
    read a run's outcome share one run this way."""

    def before(state: TaskState) -> None:
        plan = dict(item.split("=", 1) for item in os.environ.get("CT_FAULT_DRILL", "").split(",") if item)
        name = plan.get(str(state.sample_id), plan.get("*"))
        if name:
            FAULTS[name](state)

    return _with(before)
