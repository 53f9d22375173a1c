"""Where the checkout's parts are: both sides run from a checkout (or its git archive)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DIR = REPO_ROOT / "examples" / "settings"
TASK_SETS_DIR = REPO_ROOT / "examples" / "task_sets"
WORKER_SCRIPTS = REPO_ROOT / "worker"
PACKER_DIR = REPO_ROOT / "packer"
