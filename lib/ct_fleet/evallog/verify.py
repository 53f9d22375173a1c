"""Is a result a log Inspect can read in full? Checked by the worker before it uploads, by
the controller when a result arrives and again before the merge.

A one-sample `.eval` counts only when its zip opens, header.json says the run finished
(status success or error) and names its task, and every sample entry decompresses with a
matching CRC and is a JSON sample with an id and an epoch. Entries are read as Inspect
writes them (any number of zstd frames), streamed, and a bomb is refused uninflated
(evallog/entries.py); a sample too large to parse in memory is parsed as a stream. No
inspect_ai import.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ijson  # type: ignore[import-untyped]

from . import header as _header  # noqa: F401  (registers zstd with zipfile before 3.14)
from .entries import WHOLE, BadEntry, open_entry, read_entry
from .layout import HEADER_JSON, SAMPLE_NAME, SUMMARIES_JSON


@dataclass(frozen=True)
class Expected:
    """What a job's result must be, from the fleet's manifest: a log of its task (name,
    model, the task arguments it passed) holding just its sample and epoch. The merge
    groups logs by their task identity and counts each (sample, epoch) once: a result that
    differs in any of these would be counted for another job or split a task in two."""

    sample_id: str | int
    epoch: int
    task: str
    model: str = ""
    task_args: Mapping[str, Any] = field(default_factory=dict)

    def wrong_task(self, head: Mapping[str, Any]) -> str | None:
        """How a finished log's header is not of this task, or None."""
        ev = head.get("eval") or {}
        if ev.get("task") != self.task:
            return f"is a log of task {_short(ev.get('task'))}, not {self.task!r}"
        if self.model and ev.get("model") and ev.get("model") != self.model:
            return f"is a log of model {_short(ev.get('model'))}, not {self.model!r}"
        passed = ev.get("task_args_passed")
        passed = (ev.get("task_args") or {}) if passed is None else passed
        if not isinstance(passed, dict):
            return "names no task arguments"
        # An argument Inspect did not pass on may be missing; one the job did not give, or
        # another value, is another task.
        for name, value in passed.items():
            if name not in self.task_args:
                return f"has task argument {_short(name)}, which the job does not give"
            if value != self.task_args[name]:
                return f"has task argument {name}={_short(value)}, not the job's"
        return None

    def wrong_log(self, head: Mapping[str, Any], samples: list[tuple[Any, Any]]) -> str | None:
        """How a log of this header and (sample id, epoch)s is not this job's result, or None."""
        if not samples:
            return "holds no sample"
        for sample_id, epoch in samples:
            wrong = self.wrong_sample(sample_id, epoch)
            if wrong is not None:
                return wrong
        return self.wrong_task(head)

    def wrong_sample(self, sample_id: Any, epoch: Any) -> str | None:
        if (str(sample_id), epoch) != (str(self.sample_id), self.epoch):
            said = f"{str(sample_id)[:100]} epoch {str(epoch)[:20]}"
            return f"holds sample {said}, not {self.sample_id} epoch {self.epoch}"
        return None


def _short(value: Any, limit: int = 100) -> str:
    """A value a forged log holds, said in a bounded line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def problem(path: Path, expect: Expected | None = None) -> str | None:
    """None when the log reads in full (and, with `expect`, is that job's result: its task,
    model and task arguments, just its sample and epoch); else one line saying what is wrong
    with it."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = {info.filename for info in zf.infolist()}
            if HEADER_JSON not in names:
                return "no header.json (the eval never finished)"
            head = json.loads(read_entry(zf, HEADER_JSON))
            if not isinstance(head, dict) or head.get("status") not in ("success", "error"):
                return "header.json does not describe a finished eval"
            if not isinstance(head.get("eval"), dict) or not head["eval"].get("task"):
                return "header.json names no task"
            wrong = None if expect is None else expect.wrong_task(head)
            if wrong is not None:
                return wrong
            samples = sorted(n for n in names if SAMPLE_NAME.match(n))
            if not samples:
                return "no sample in the log"
            for name in samples:
                sample = sample_keys(zf, name)  # the CRC and size are checked as it inflates
                if not isinstance(sample, dict) or "id" not in sample or "epoch" not in sample:
                    return f"{name} is not a sample"
                wrong = None if expect is None else expect.wrong_sample(sample["id"], sample["epoch"])
                if wrong is not None:
                    return wrong
            if SUMMARIES_JSON in names:
                rows = json.loads(read_entry(zf, SUMMARIES_JSON))
                if not isinstance(rows, list) or not all(
                    isinstance(r, dict) and "id" in r and "epoch" in r for r in rows
                ):
                    return "summaries.json is not a list of sample summaries"
    except BadEntry as exc:
        return str(exc)
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, KeyError) as exc:
        return f"unreadable zip ({type(exc).__name__}: {exc})"
    except Exception as exc:  # JSON, zstd's own errors, unknown methods: all mean "does not read"
        return f"corrupt content ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def sample_keys(zf: zipfile.ZipFile, name: str) -> Any:
    """The sample entry parsed whole, or, when it is too large to hold, its top-level
    scalars (id and epoch among them) from a streamed parse of all of it."""
    info = zf.getinfo(name)
    if info.file_size <= WHOLE:
        return json.loads(read_entry(zf, name))
    keys: dict[str, Any] = {}
    with open_entry(zf, name) as fh:
        for prefix, event, value in ijson.parse(fh, buf_size=1 << 20, use_float=True):
            if prefix == "" and event != "start_map" and event != "end_map" and event != "map_key":
                return None  # a JSON document, but not an object
            if "." not in prefix and prefix and event in ("string", "number", "integer", "double"):
                keys[prefix] = value
    return keys


def is_readable(path: Path) -> bool:
    return problem(path) is None


def digest(path: Path) -> bytes:
    """A cheap fingerprint of a verified file: unchanged bytes need no second full check
    (raw bytes, half a hex string's size: a controller keeps one per result)."""
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return sha.digest()
