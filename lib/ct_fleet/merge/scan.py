"""Pass 1 of the merge: read each input's header and summaries, keep one record per
(str(sample id), epoch) in the spool (merge/spool.py), which also holds each input's stats."""

from __future__ import annotations

import json
import logging
import os
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from inspect_ai.model import ModelUsage

from ..evallog.entries import WHOLE
from ..evallog.layout import HEADER_JSON, JOURNAL_SUMMARIES, SAMPLES_DIR, SUMMARIES_JSON, dumps
from ..evallog.reader import EvalZip
from ..evallog.verify import sample_keys
from ..evallog.zipio import RawMember
from .identity import identity_key
from .spool import Spool
from .stats import StatsTotals
from .util import error_text, timestamp

logger = logging.getLogger("ct_fleet.merge")


@dataclass
class Group:
    """One task identity: its template header and counters; its rows live in the spool."""

    key: str
    index: int  # the group's id in the spool
    header: dict[str, Any]  # template: the header of the input first by path
    spool: Spool
    template_path: bytes = b""  # that input's path (file-system bytes): the group's place in the output
    last_path: bytes = b""  # the largest path read
    in_order: bool = True  # every input came after the ones before it by path: `totals` is exact
    files: int = 0
    samples_seen: int = 0  # sample rows read, duplicates included
    created: str = ""  # earliest eval.created over all inputs
    totals: StatsTotals = field(default_factory=StatsTotals)  # stats of every input of the group, as read

    @property
    def duplicates_dropped(self) -> int:
        return self.samples_seen - self.spool.count_records(self.index)


class Unreadable(Exception):
    """An input the merge cannot use; the message says why (one line)."""


# Junk where a log should be raises anything while it is read (zstd has its own error
# types); while reading an input, every exception means "skip it", never "fail the merge".
_MALFORMED = (Exception,)


def read_input(path: Path) -> tuple[dict[str, Any], str, list[tuple[dict[str, Any], RawMember]]]:
    """(header, identity key, [(summary row, sample entry)]) of one input; Unreadable if it is not a log.

    Only header.json, the summaries and the kept sample entries are inflated (one read of
    the file, evallog/reader.py); each kept sample entry is inflated and parsed once here
    (its CRC checked), so that pass 2, which copies compressed bytes without looking,
    never copies a corrupt entry.
    """
    try:
        with EvalZip(path) as zf:
            entries = zf.entries
            if HEADER_JSON not in entries:
                raise Unreadable("no header.json (eval unfinished or crashed)")
            header = json.loads(zf.read(HEADER_JSON))
            if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
                raise Unreadable("header.json is not an eval log header")
            key = identity_key(header)
            if SUMMARIES_JSON in entries:
                rows = json.loads(zf.read(SUMMARIES_JSON))
            else:
                journal = sorted(
                    (n for n in entries if n.startswith(JOURNAL_SUMMARIES) and n.endswith(".json")),
                    key=lambda n: int(n[len(JOURNAL_SUMMARIES) : -len(".json")]),
                )
                rows = [row for n in journal for row in json.loads(zf.read(n))]
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                raise Unreadable("its sample summaries are not a list of summaries")
            latest: dict[tuple[str, int], dict[str, Any]] = {}
            for row in rows:  # last row per (id, epoch) wins, as in Inspect's readers
                latest[(str(row["id"]), int(row["epoch"]))] = row
            samples = []
            for row in latest.values():
                name = f"{SAMPLES_DIR}{row['id']}_epoch_{row['epoch']}.json"
                if name not in entries:
                    logger.warning("%s: summary for %s but no sample entry; ignored", path, name)
                    continue
                try:
                    sample = _sample(zf, path, name)
                except Exception as exc:
                    raise Unreadable(f"sample entry {name} is corrupt ({type(exc).__name__}: {exc})") from None
                if not isinstance(sample, dict):
                    raise Unreadable(f"sample entry {name} is not a sample")
                samples.append((row, zf.member(name)))
            return header, key, samples
    except Unreadable:
        raise
    except _MALFORMED as ex:
        raise Unreadable(f"unreadable .eval ({type(ex).__name__}: {str(ex)[:200]})") from None


def _sample(zf: EvalZip, path: Path, name: str) -> Any:
    """The sample entry parsed (its CRC checked): whole when it is small, else as a stream
    in bounded memory (evallog.verify), a bomb refused either way."""
    if zf.member(name).file_size <= WHOLE:
        return json.loads(zf.read(name))
    with zipfile.ZipFile(path) as whole:
        return sample_keys(whole, name)


_Row = tuple[dict[str, Any], RawMember, str | None, datetime, int]


def _checked(
    header: dict[str, Any], samples: list[tuple[dict[str, Any], RawMember]]
) -> tuple[dict[str, Any], dict[str, dict[str, ModelUsage]], str, list[_Row]]:
    """(the stats the merged header needs, their usage validated, created, rows with error,
    completion time and epoch): Unreadable when any is junk."""
    try:
        raw = header.get("stats") or {}
        created = header["eval"].get("created", "")
        if not isinstance(raw, dict) or not isinstance(created, str):
            raise Unreadable("its stats or creation time are malformed")
        timestamp(created)
        stats = {
            "started_at": raw.get("started_at") or "",
            "completed_at": raw.get("completed_at") or "",
            "model_usage": raw.get("model_usage") or {},
            "role_usage": raw.get("role_usage") or {},
            "connection_limit_history": raw.get("connection_limit_history") or [],
        }
        usages = StatsTotals.usages(stats)
        rows = [
            (row, member, error_text(row.get("error")), timestamp(row.get("completed_at")), int(row["epoch"]))
            for row, member in samples
        ]
    except Unreadable:
        raise
    except _MALFORMED as ex:
        raise Unreadable(f"malformed stats or sample summary ({type(ex).__name__}: {str(ex)[:200]})") from None
    return stats, usages, created, rows


# (path, header, [(sample id, epoch)]) -> why the input is not what its caller expects, or None
Check = Callable[[Path, dict[str, Any], list[tuple[Any, Any]]], "str | None"]


def group_inputs(
    inputs: Iterable[Path], spool: Spool, groups: dict[str, Group] | None = None, check: Check | None = None
) -> dict[str, Group]:
    """Pass 1: each input's header and summaries into the spool, grouped by task identity,
    into `groups` (new ones added; an earlier pass's are carried on), which it returns.

    An input that is not a readable log is left out, in the spool's list of skipped inputs."""
    groups = {} if groups is None else groups
    for path in inputs:
        try:
            header, key, samples = read_input(path)
            wrong = None if check is None else check(path, header, [(r["id"], r["epoch"]) for r, _ in samples])
            if wrong is not None:
                raise Unreadable(wrong)
            stats, usages, created, rows = _checked(header, samples)
        except Unreadable as exc:
            logger.warning("skipping %s: %s", path, exc)
            spool.add_skipped(path, str(exc))
            continue
        place = os.fsencode(path)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(key=key, index=len(groups), header=header, spool=spool, template_path=place)
        elif place < group.template_path:  # inputs may come in any order: the first by path is the template
            group.header, group.template_path = header, place
        group.in_order = group.in_order and place > group.last_path
        group.last_path = max(group.last_path, place)
        if created and (not group.created or timestamp(created) < timestamp(group.created)):
            group.created = created
        invalidated = bool(header.get("invalidated"))
        group.totals.add(stats, invalidated, usages)
        # kept on disk only for a header whose inputs are not all contributing (header.py)
        file_index = spool.add_file(group.index, str(path), invalidated, stats)
        group.files += 1
        for row, member, error, completed_at, epoch in rows:
            group.samples_seen += 1
            spool.add_record(
                group.index,
                row["id"],
                epoch,
                file_index,
                error,
                completed_at,
                dumps(row),
                member,
            )
    return groups
