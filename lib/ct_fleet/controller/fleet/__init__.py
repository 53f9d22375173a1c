"""The running fleet: a planned fleet run to its end and merged.

- execute (execution.py): start the cloud, run, close; run_fleet plans and executes
- RunContext (context.py): what every part of a running fleet shares
- FleetRun (run.py): resume, enqueue, track (tracking.py: Tracking, the loop it owns), tear down, merge
- WorkerPool (pool.py): launch (launcher.py: across pools), boot diagnosis, replacement and scale-up, termination
- ResultCollector (collector.py): done reports, verified downloads, reruns, dead letters
- JobTracker (tracker.py): every job's state from the reports, pure; scaling.py: when to add workers
"""

from .boot_logs import DETERMINISTIC_STEPS
from .execution import FleetLogs, RunHooks, execute, run_fleet
from .interrupts import FleetInterrupted, stop_signals
from .merging import merge_fleet
from .pool import WorkerPool
from .run import FleetRun
from .sweep import sweep_orphan_secrets
from .tracker import JobTracker

__all__ = [
    "DETERMINISTIC_STEPS",
    "FleetInterrupted",
    "FleetRun",
    "JobTracker",
    "RunHooks",
    "WorkerPool",
    "execute",
    "merge_fleet",
    "FleetLogs",
    "run_fleet",
    "stop_signals",
    "sweep_orphan_secrets",
]
