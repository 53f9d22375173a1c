"""ct-fleet: run Inspect AI evaluations on a fleet of EC2 workers or an embedded local cloud.

    from ct_fleet import run_fleet

    logs = run_fleet("qa.py@qa", model=["openai/gpt-4o", "openai/gpt-4o-mini"], temperature=0, epochs=3)
    print([log.results for log in logs], logs.result.fleet_id)

`run_fleet` takes what `inspect_ai.eval()` takes and runs what `ct-fleet eval` runs,
returning the merged logs' headers (see `ct_fleet.controller`); `merge_dir`
merges any directory of one-sample `.eval` logs, as `ct-fleet merge` does.

The public names load on first use: a worker process imports `ct_fleet.worker` and must
not pay for (or depend on) the controller.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .controller.fleet import FleetInterrupted, FleetLogs, RunHooks, run_fleet
    from .controller.planning import FleetRequest, plan_fleet
    from .controller.reporting import Progress, RunResult, exit_status
    from .errors import BadInput
    from .merge import MergedTask, merge_dir, merge_eval_logs

__version__ = "0.1.0"

_PUBLIC = {
    "BadInput": ".errors",
    "FleetInterrupted": ".controller.fleet",
    "FleetLogs": ".controller.fleet",
    "FleetRequest": ".controller.planning",
    "MergedTask": ".merge",
    "Progress": ".controller.reporting",
    "RunHooks": ".controller.fleet",
    "RunResult": ".controller.reporting",
    "exit_status": ".controller.reporting",
    "merge_dir": ".merge",
    "merge_eval_logs": ".merge",
    "plan_fleet": ".controller.planning",
    "run_fleet": ".controller.fleet",
}

__all__ = [
    "BadInput",
    "FleetInterrupted",
    "FleetLogs",
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
