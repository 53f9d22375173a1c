"""Named phases of a run, observable from outside: where interrupt tests stop a controller.

With CT_FLEET_PAUSE_AT=<phase> in the run's environment the controller writes runs/<fleet>/paused-at-<phase> when
it reaches that phase and waits there until a signal arrives, the file is deleted (the
run goes on), or CT_FLEET_PAUSE_MAX seconds pass. A test waits for the file, then sends
SIGINT or SIGTERM, or does its damage and deletes the file: it acts exactly in that
phase, with no sleeps to tune. When each phase was first reached is kept in
runs/<fleet>/phases.json, for the run report's phase times.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from ...protocol.run_layout import paused_marker
from ..reporting import record_phase

ENQUEUE = "enqueue"  # queues and manifest exist, work messages sent, nothing launched
TRACKING = "tracking"  # workers launched with their secrets, reports being read
VERIFY = "verify"  # every job done; about to check the local results again before the merge
END_WAIT = "end-wait"  # every job done, waiting for the workers to exit
MERGE = "merge"  # workers gone, merging the results
PHASES = (ENQUEUE, TRACKING, VERIFY, END_WAIT, MERGE)
# Not places to pause: the ends of the phase times.
START = "start"  # the controller took the fleet
DONE = "done"  # merged


_paused: set[str] = set()
# (phase, seconds at most) the run asked to pause at, set by begin() from its environment.
_pause: tuple[str | None, float] = (None, 0.0)


def reached(phase: str, run_dir: Path) -> None:
    """Pause here if asked to (once per phase and process; a phase may be reached again)."""
    record_phase(run_dir, phase)
    at, most = _pause
    if at != phase or phase in _paused:
        return
    _paused.add(phase)
    marker = paused_marker(run_dir, phase)
    marker.write_text(str(os.getpid()))
    deadline = time.monotonic() + most
    try:
        while time.monotonic() < deadline and marker.exists():
            time.sleep(0.1)
    finally:
        marker.unlink(missing_ok=True)


def begin(run_dir: Path, environ: Mapping[str, str]) -> None:
    """A run starts: mark it, and take the pause its environment asks for, if any."""
    global _pause
    _pause = (environ.get("CT_FLEET_PAUSE_AT") or None, float(environ.get("CT_FLEET_PAUSE_MAX") or 300))
    record_phase(run_dir, START, first=True)


def done(run_dir: Path) -> None:
    record_phase(run_dir, DONE)
