"""Reporting: how far a run is, what it cost, what it returns, its report, and fleets seen from any machine."""

from .cost import cost_so_far
from .merged import MergedResult, by_task, merged_model, merged_results, metrics_text, read_merged
from .missing import dead_jobs, last_line, missing_jobs, rerun_command
from .observe import FleetRow, cloud_status, fetch_results, log_keys
from .progress import Progress, progress_of
from .report_html import write_report
from .result import RunResult, exit_status
from .run_report import RunReport, build_report
from .states import JobStates
from .status import (
    FleetStatus,
    checked_fleet_id,
    controller_here,
    is_local_fleet,
    local_fleets,
    local_status,
    remote_controller,
    s3_status,
)
from .summary import SCHEMA_VERSION, RunSummary, interrupted_summary, run_summary
from .timeline import keep_boot_logs, record_attempt, record_phase, record_worker
from .usage import MODEL_PRICES, UsageTotals, model_prices, price_table, total_tokens

__all__ = [
    "FleetRow",
    "FleetStatus",
    "JobStates",
    "MergedResult",
    "Progress",
    "RunReport",
    "RunResult",
    "RunSummary",
    "SCHEMA_VERSION",
    "MODEL_PRICES",
    "UsageTotals",
    "checked_fleet_id",
    "build_report",
    "by_task",
    "cloud_status",
    "controller_here",
    "cost_so_far",
    "dead_jobs",
    "exit_status",
    "fetch_results",
    "interrupted_summary",
    "is_local_fleet",
    "keep_boot_logs",
    "last_line",
    "local_fleets",
    "local_status",
    "log_keys",
    "merged_model",
    "merged_results",
    "metrics_text",
    "missing_jobs",
    "progress_of",
    "read_merged",
    "record_attempt",
    "record_phase",
    "record_worker",
    "remote_controller",
    "rerun_command",
    "run_summary",
    "s3_status",
    "model_prices",
    "price_table",
    "total_tokens",
    "write_report",
]
