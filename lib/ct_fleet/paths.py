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


def cache_dir(environ: Mapping[str, str]) -> Path:
    """This machine's ct-fleet cache: CT_FLEET_CACHE_DIR, else ct-fleet/ under XDG_CACHE_HOME
    or ~/.cache (as bin/test and bin/build-images read it)."""
    if environ.get("CT_FLEET_CACHE_DIR"):
        return Path(environ["CT_FLEET_CACHE_DIR"])
    home = environ.get("HOME")
    return Path(environ.get("XDG_CACHE_HOME") or (Path(home) if home else Path.home()) / ".cache") / "ct-fleet"


def code_artifacts_dir(environ: Mapping[str, str]) -> Path:
    """Where local instances keep the artifacts they fetched (the code, one per SHA; the
    --extra-src trees, one per digest) for the next instance of this machine
    (worker/lib.sh ct_unpack_artifact, LB_CODE_CACHE)."""
    return cache_dir(environ) / "code"


def sites_dir(environ: Mapping[str, str]) -> Path:
    """Where a fleet's requirements are installed once per machine, each set in a directory
    of its own: the controller's probe (controller/planning/overlay.py) and every local
    instance (worker/settings-pull.sh, LB_SITE_CACHE) share them."""
    return cache_dir(environ) / "overlays"
