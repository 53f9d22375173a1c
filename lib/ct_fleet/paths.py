"""Where the checkout's parts are: both sides run from a checkout (or its git archive)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DIR = REPO_ROOT / "examples" / "settings"
TASK_SETS_DIR = REPO_ROOT / "examples" / "task_sets"
WORKER_SCRIPTS = REPO_ROOT / "worker"
PACKER_DIR = REPO_ROOT / "packer"


def runs_dir(environ: Mapping[str, str]) -> Path:
    """Where fleets keep their results and logs: CT_FLEET_RUNS, else runs/ in the checkout."""
    return Path(environ.get("CT_FLEET_RUNS") or REPO_ROOT / "runs")
