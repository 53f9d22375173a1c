"""Reporting: how far a run is, what it cost, what it returns, and fleets seen from any machine."""

from .cost import cost_so_far
from .missing import dead_jobs, last_line, missing_jobs, rerun_command
from .observe import FleetRow, cloud_status, fetch_results, log_keys
from .progress import Progress, progress_of
from .result import RunResult, exit_status
from .states import JobStates
from .status import FleetStatus, checked_fleet_id, is_local_fleet, local_status, s3_status
from .summary import SCHEMA_VERSION, RunSummary, interrupted_summary, run_summary
from .usage import UsageTotals, total_tokens

__all__ = [
    "FleetRow",
    "FleetStatus",
    "JobStates",
    "Progress",
    "RunResult",
    "RunSummary",
    "SCHEMA_VERSION",
    "UsageTotals",
    "checked_fleet_id",
    "cloud_status",
    "cost_so_far",
    "dead_jobs",
    "exit_status",
    "fetch_results",
    "interrupted_summary",
    "is_local_fleet",
    "last_line",
    "local_status",
    "log_keys",
    "missing_jobs",
    "progress_of",
    "rerun_command",
    "run_summary",
    "s3_status",
    "total_tokens",
]
