"""Reporting: how far a run is, what it cost, what it returns, and fleets seen from any machine."""

from .cost import cost_so_far
from .missing import dead_jobs, last_line, missing_jobs, rerun_command
from .observe import FleetRow, RunStatus, cloud_status, fleet_status, log_keys
from .progress import Progress, progress_of
from .result import RunResult, exit_status
from .states import JobStates
from .summary import SCHEMA_VERSION, RunSummary, interrupted_summary, run_summary
from .usage import UsageTotals

__all__ = [
    "FleetRow",
    "JobStates",
    "Progress",
    "RunResult",
    "RunStatus",
    "RunSummary",
    "SCHEMA_VERSION",
    "UsageTotals",
    "cloud_status",
    "cost_so_far",
    "dead_jobs",
    "exit_status",
    "fleet_status",
    "interrupted_summary",
    "last_line",
    "log_keys",
    "missing_jobs",
    "progress_of",
    "rerun_command",
    "run_summary",
]
