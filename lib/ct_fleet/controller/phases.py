"""Named phases of a run, observable from outside: where interrupt tests stop a controller.

With CT_FLEET_PAUSE_AT=<phase> the controller writes runs/<fleet>/paused-at-<phase> when
it reaches that phase and waits there until a signal arrives (or CT_FLEET_PAUSE_MAX
seconds pass). A test waits for the file, then sends SIGINT or SIGTERM: the interrupt
lands exactly in that phase, with no sleeps to tune.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENQUEUE = "enqueue"  # queues and manifest exist, work messages sent, nothing launched
TRACKING = "tracking"  # workers launched with their secrets, reports being read
END_WAIT = "end-wait"  # every job done, waiting for the workers to exit
MERGE = "merge"  # workers gone, merging the results
PHASES = (ENQUEUE, TRACKING, END_WAIT, MERGE)


def reached(phase: str, run_dir: Path) -> None:
    if os.environ.get("CT_FLEET_PAUSE_AT") != phase:
        return
    marker = run_dir / f"paused-at-{phase}"
    marker.write_text(str(os.getpid()))
    deadline = time.monotonic() + float(os.environ.get("CT_FLEET_PAUSE_MAX", "300"))
    try:
        while time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        marker.unlink(missing_ok=True)
