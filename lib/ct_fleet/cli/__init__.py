"""ct-fleet's command line: thin click commands over the controller, and what a person sees.

- main: the command group, error handling
- eval_cmd, merge_cmd, run_job_cmd, build_ami: one module per command
- fleet_cmds: the small commands that look at fleets (status, fleets, report, logs, ssh)
- display: tables and the live progress panel

`cli` and `main` load on first use, so `python -m ct_fleet.cli.build_ami` (bin/build-ami)
runs its module without importing it twice.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        # import_module, not `from . import main`: that looks the name up on this package
        # first, which lands back here ("main" is in __all__) and recurses.
        return getattr(importlib.import_module(f"{__name__}.main"), name)
    raise AttributeError(f"module 'ct_fleet.cli' has no attribute {name!r}")
