"""ct-fleet: run Inspect AI evaluations on a fleet of EC2 workers or an embedded local cloud.

    from ct_fleet import run_fleet

    result = run_fleet(task_file="smoke", policy="honest", epochs=3)
    print(result.fleet_id, [m.path for m in result.merged])

`run_fleet` is what `ct-fleet eval` runs (see `ct_fleet.controller.run`); `merge_dir`
merges any directory of one-sample `.eval` logs, as `ct-fleet merge` does.

The public names load on first use: a worker process imports `ct_fleet.worker` and must
not pay for (or depend on) the controller.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .controller.run import FleetRequest, RunHooks, exit_status, plan_fleet, run_fleet
    from .controller.spec import FleetInterrupted, Progress, RunResult
    from .errors import BadInput
    from .merge import MergedTask, merge_dir, merge_eval_logs

__version__ = "0.1.0"

_PUBLIC = {
    "BadInput": ".errors",
    "FleetInterrupted": ".controller.spec",
    "FleetRequest": ".controller.run",
    "MergedTask": ".merge",
    "Progress": ".controller.spec",
    "RunHooks": ".controller.run",
    "RunResult": ".controller.spec",
    "exit_status": ".controller.run",
    "merge_dir": ".merge",
    "merge_eval_logs": ".merge",
    "plan_fleet": ".controller.run",
    "run_fleet": ".controller.run",
}

__all__ = [
    "BadInput",
    "FleetInterrupted",
    "FleetRequest",
    "MergedTask",
    "Progress",
    "RunHooks",
    "RunResult",
    "exit_status",
    "merge_dir",
    "merge_eval_logs",
    "plan_fleet",
    "run_fleet",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ct_fleet' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
