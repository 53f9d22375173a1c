"""Rate-limit retries a job made, for the fleet's adaptive model budget.

Inspect retries a rate-limited request itself (the sample goes on), so the worker learns
of the pressure from Inspect's own hook (job_hook.py), counted in the job process and
written beside the job's output (`<output>.ratelimited`, one integer) when the eval ends.
A command job may write the same file. The worker reads it into the done report.
"""

from __future__ import annotations

from pathlib import Path


def sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".ratelimited")


def pop(out: Path) -> int:
    """The count a job left beside `out` (0 when none), the file removed."""
    path = sidecar(out)
    try:
        text = path.read_text().strip()
    except OSError:
        return 0
    path.unlink(missing_ok=True)
    return int(text) if text.isdigit() else 0
