"""The questions `ct-fleet eval` asks: the cost before a billed launch, a large run, and
what to do with running workers at Ctrl-C. None is asked without a terminal: a script
confirms with `--ec2-arg auto_confirm=true`, and an interrupt then stops the fleet."""

from __future__ import annotations

import select
import sys

import click
from rich.console import Console

from ..controller.planning import PlannedFleet
from ..errors import BadInput
from .console import err
from .display import LiveProgress, estimate_table

# Long enough to read and answer; short enough that an unattended laptop stops its bill.
PROMPT_SECONDS = 60


def say(out: Console, text: str) -> None:
    try:
        out.print(text, highlight=False, soft_wrap=True)
    except OSError:
        pass  # the terminal was closed (at the Ctrl-C prompt, say): stopping the fleet matters more


def confirm_cost(planned: PlannedFleet, out: Console) -> bool:
    """Show the estimate; launch only when confirmed (or auto_confirm). estimate=true stops here."""
    cfg = planned.spec.config
    est = planned.estimate()
    out.print(estimate_table(est, cfg.instance_type))
    if cfg.estimate:
        return False
    if cfg.auto_confirm:
        return True
    if not sys.stdin.isatty():
        raise BadInput("cannot ask for confirmation without a terminal: pass --ec2-arg auto_confirm=true")
    # Scaling may grow the fleet past its first launch: the question names both.
    most = max(est.workers, planned.max_workers)
    grow = f", growing to at most {most} as the queue needs," if most > est.workers else ""
    return click.confirm(
        f"launch {est.workers} {cfg.instance_type} worker(s){grow} for about ${est.total:.2f}?", default=False
    )


def confirm_large(planned: PlannedFleet) -> bool:
    """Many jobs (often a typo in --epochs) run only when confirmed, or with auto_confirm."""
    jobs = len(planned.spec.jobs)
    if planned.spec.config.auto_confirm:
        return True
    if not sys.stdin.isatty():
        raise BadInput(f"{jobs:,} jobs is a large run: confirm with --ec2-arg auto_confirm=true")
    return click.confirm(f"start {jobs:,} jobs?", default=False)


def ask_leave_running(live: LiveProgress) -> bool:
    """Ctrl-C with workers up: stop them (the default), or leave them for a later resume.

    Stop, unless "leave" is typed within PROMPT_SECONDS: without a terminal, on no answer
    (the laptop was walked away from: workers would bill until someone comes back), on
    a closed terminal, or on any other answer.
    """
    if not sys.stdin.isatty():
        return False
    live.stop()  # a redrawing table would bury the question
    err.print(
        f"\ninterrupted: stop the fleet, or leave its workers running for a later resume? "
        f"[stop/leave] (stop in {PROMPT_SECONDS}s): ",
        end="",
        highlight=False,
        markup=False,
    )
    try:
        ready, _, _ = select.select([sys.stdin], [], [], PROMPT_SECONDS)
        answer = sys.stdin.readline() if ready else ""
    except (OSError, ValueError):  # the terminal is gone: that is an answer too
        return False
    if not ready:
        err.print("no answer: stopping", highlight=False)
    return answer.strip().lower() == "leave"
