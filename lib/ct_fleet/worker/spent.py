"""The model usage an attempt paid for that no result will carry.

A job's Inspect hook (job_hook.py) adds up each model call's usage in the job process and
keeps it beside the job's output (`<output>.spent.json`, rewritten after each call). A
committed checkpoint empties it: what came before is in the checkpoint, and a resumed
sample's usage restores it. An attempt that ends with a result drops the file (its log
counts the calls); one that ends without (its process killed, a crash, a retry) reads it
into its done report, so the run's tokens and model cost count the calls it paid for.
The worker's heartbeats carry each running job's so far (protocol.Held): when the whole
worker is lost, the lost attempt's report counts what its last heartbeat said.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".spent.json")


def write(out: Path, usage: dict[str, dict[str, Any]]) -> None:
    """Keep USAGE (by model) beside OUT, whole even if the process is killed mid-write."""
    path = sidecar(out)
    if not usage:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(usage))
    os.replace(tmp, path)


def peek(out: Path) -> dict[str, dict[str, Any]]:
    """The usage a running job keeps beside OUT so far ({} when none, or when it does not read)."""
    try:
        data = json.loads(sidecar(out).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def pop(out: Path) -> dict[str, dict[str, Any]]:
    """The usage a job left beside OUT ({} when none, or when it does not read), the file removed."""
    data = peek(out)
    sidecar(out).unlink(missing_ok=True)
    return data
