"""Cheap checks on .eval files without loading Inspect: is a log finished, what is its status.
header.json is read as Inspect writes it, and never inflated past its bound (entries.py)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

if sys.version_info < (3, 14):
    import zipfile_zstd  # noqa: F401  (teaches zipfile the zstd method Inspect writes)

from .entries import read_entry


def read_header(path: Path) -> dict[str, Any] | None:
    """The log's header.json, or None when the file is unreadable or the run never finished."""
    try:
        with zipfile.ZipFile(path) as zf:
            header = json.loads(read_entry(zf, "header.json"))
            return header if isinstance(header, dict) else None
    except Exception:  # zstd raises its own error types on damaged bytes
        return None


def read_model_usage(path: Path) -> dict[str, Any]:
    """The model usage of the log's samples over every attempt, by model: their summaries'
    (summaries.json). A resumed sample's counts its earlier attempts too, where the
    header's stats count only the last (Inspect's retry); the stats when the log has no
    summaries; {} when it does not read."""
    try:
        with zipfile.ZipFile(path) as zf:
            if "summaries.json" not in zf.NameToInfo:
                stats = json.loads(read_entry(zf, "header.json")).get("stats") or {}
                return dict(stats.get("model_usage") or {})
            rows = json.loads(read_entry(zf, "summaries.json"))
    except Exception:  # zstd raises its own error types on damaged bytes
        return {}
    total: dict[str, Any] = {}
    for row in rows if isinstance(rows, list) else []:
        for model, usage in ((row or {}).get("model_usage") or {}).items():
            into = total.setdefault(model, {})
            for key, value in (usage or {}).items():
                if isinstance(value, int | float):
                    into[key] = into.get(key, 0) + value
    return total


def is_finished(path: Path) -> bool:
    header = read_header(path)
    return header is not None and header.get("status") in ("success", "error")


def sample_error(header: dict[str, Any]) -> str | None:
    """The error text of a finished one-sample log whose sample failed, else None."""
    if header.get("status") == "success":
        return None
    error = header.get("error") or {}
    return str(error.get("message") or "sample failed")
