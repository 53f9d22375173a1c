"""This process's environment, as a child process inherits it.

Settings are read from the environment once, where a process starts (the CLI, the worker
and each job's process, the fork server, `python -m ct_fleet.settings`); what they read is
passed on.
What is left is inheritance: a process we start gets ours, with some names changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["inherited"]


def inherited(extra: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a child process: this process's, without `drop`, plus `extra`."""
    dropped = set(drop)
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **(extra or {})}
