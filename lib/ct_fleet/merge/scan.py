"""Pass 1 of the merge: read each input's header and summaries, keep one record per
(str(sample id), epoch), park summaries and entry locations in a spool file."""

from __future__ import annotations

import json
import logging
import pickle
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..evallog import zipio
from ..evallog.layout import HEADER_JSON, JOURNAL_SUMMARIES, SAMPLES_DIR, SUMMARIES_JSON, dumps
from ..evallog.zipio import RawMember
from .identity import identity_key
from .util import error_text, timestamp

logger = logging.getLogger("ct_fleet.merge")


class Spool:
    """An append-only temporary file: pass 1 parks each sample's summary and zip entry
    location (and each input's stats) here, keeping only an offset in memory."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="ct-fleet-merge-")
        self._end = 0

    def put(self, value: Any) -> tuple[int, int]:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(data)
        offset = self._end
        self._end += len(data)
        return offset, len(data)

    def get(self, offset: int, length: int) -> Any:
        self._file.seek(offset)
        return pickle.loads(self._file.read(length))

    def close(self) -> None:
        self._file.close()


@dataclass(slots=True)
class Record:
    """One sample of one input: enough to choose it; its summary and entry are spooled."""

    file: int  # index into Group.files
    sample_id: str | int
    epoch: int
    error: str | None
    completed_at: datetime
    spool: Spool
    offset: int
    length: int

    def _load(self) -> tuple[bytes, RawMember]:
        loaded: tuple[bytes, RawMember] = self.spool.get(self.offset, self.length)
        return loaded

    @property
    def summary(self) -> bytes:
        """Compact JSON of the sample summary."""
        return self._load()[0]

    @property
    def member(self) -> RawMember:
        return self._load()[1]


@dataclass(slots=True)
class FileStats:
    started_at: str
    completed_at: str
    model_usage: dict[str, Any]
    role_usage: dict[str, Any]
    connection_limit_history: list[Any]


@dataclass(slots=True)
class FileInfo:
    path: str
    invalidated: bool
    spool: Spool
    offset: int
    length: int

    def stats(self) -> FileStats:
        stats: FileStats = self.spool.get(self.offset, self.length)
        return stats


@dataclass
class Group:
    key: str
    header: dict[str, Any]  # template: the first input's header (inputs sorted by path)
    spool: Spool = field(default_factory=Spool)
    files: list[FileInfo] = field(default_factory=list)
    records: dict[tuple[str, int], Record] = field(default_factory=dict)
    duplicates_dropped: int = 0
    created: str = ""  # earliest eval.created over all inputs


class Unreadable(Exception):
    """An input the merge cannot use; the message says why (one line)."""


# Junk where a log should be raises anything while it is read (zstd has its own error
# types); while reading an input, every exception means "skip it", never "fail the merge".
_MALFORMED = (Exception,)


def read_input(path: Path) -> tuple[dict[str, Any], str, list[tuple[dict[str, Any], RawMember]]]:
    """(header, identity key, [(summary row, sample entry)]) of one input; Unreadable if it is not a log.

    Every kept sample entry is inflated and parsed once here (its CRC checked), so that
    pass 2, which copies compressed bytes without looking, never copies a corrupt entry.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zipio.live_infos(zf)
            if HEADER_JSON not in infos:
                raise Unreadable("no header.json (eval unfinished or crashed)")
            header = json.loads(zf.read(infos[HEADER_JSON]))
            if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
                raise Unreadable("header.json is not an eval log header")
            key = identity_key(header)
            if SUMMARIES_JSON in infos:
                rows = json.loads(zf.read(infos[SUMMARIES_JSON]))
            else:
                journal = sorted(
                    (n for n in infos if n.startswith(JOURNAL_SUMMARIES) and n.endswith(".json")),
                    key=lambda n: int(n[len(JOURNAL_SUMMARIES) : -len(".json")]),
                )
                rows = [row for n in journal for row in json.loads(zf.read(infos[n]))]
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                raise Unreadable("its sample summaries are not a list of summaries")
            latest: dict[tuple[str, int], dict[str, Any]] = {}
            for row in rows:  # last row per (id, epoch) wins, as in Inspect's readers
                latest[(str(row["id"]), int(row["epoch"]))] = row
            samples = []
            for row in latest.values():
                name = f"{SAMPLES_DIR}{row['id']}_epoch_{row['epoch']}.json"
                info = infos.get(name)
                if info is None:
                    logger.warning("%s: summary for %s but no sample entry; ignored", path, name)
                    continue
                try:
                    sample = json.loads(zf.read(info))
                except Exception as exc:
                    raise Unreadable(f"sample entry {name} is corrupt ({type(exc).__name__}: {exc})") from None
                if not isinstance(sample, dict):
                    raise Unreadable(f"sample entry {name} is not a sample")
                samples.append((row, RawMember.from_info(info)))
            return header, key, samples
    except Unreadable:
        raise
    except _MALFORMED as ex:
        raise Unreadable(f"unreadable .eval ({type(ex).__name__}: {str(ex)[:200]})") from None


def scan_file(path: Path) -> tuple[dict[str, Any], list[tuple[dict[str, Any], RawMember]]] | None:
    """Read one input's header and summaries; None (with a warning) if it is unusable."""
    try:
        header, _, samples = read_input(path)
    except Unreadable as exc:
        logger.warning("skipping %s: %s", path, exc)
        return None
    return header, samples


def better(new: Record, old: Record) -> bool:
    """No error beats an error; then the newest completed_at; ties keep the first seen."""
    return (new.error is None, new.completed_at) > (old.error is None, old.completed_at)


def _records(
    samples: list[tuple[dict[str, Any], RawMember]],
) -> list[tuple[dict[str, Any], RawMember, str | None, datetime]]:
    """Each sample's summary with its error and completion time, or Unreadable when junk."""
    try:
        return [
            (row, member, error_text(row.get("error")), timestamp(row.get("completed_at"))) for row, member in samples
        ]
    except _MALFORMED as ex:
        raise Unreadable(f"malformed sample summary ({type(ex).__name__}: {str(ex)[:200]})") from None


def group_inputs(inputs: Iterable[Path], on_skip: Callable[[Path, str], None] | None = None) -> list[Group]:
    groups: dict[str, Group] = {}
    for path in sorted({Path(p) for p in inputs}, key=str):
        try:
            header, key, samples = read_input(path)
            records = _records(samples)
            stats = header.get("stats") or {}
            if not isinstance(stats, dict):
                raise Unreadable("its stats are not a mapping")
            created = header["eval"].get("created", "")
            if created and not isinstance(created, str):
                raise Unreadable("its creation time is not text")
        except Unreadable as exc:
            logger.warning("skipping %s: %s", path, exc)
            if on_skip:
                on_skip(path, str(exc))
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(key=key, header=header)
        if created and (not group.created or timestamp(created) < timestamp(group.created)):
            group.created = created
        offset, length = group.spool.put(
            FileStats(
                started_at=stats.get("started_at") or "",
                completed_at=stats.get("completed_at") or "",
                model_usage=stats.get("model_usage") or {},
                role_usage=stats.get("role_usage") or {},
                connection_limit_history=stats.get("connection_limit_history") or [],
            )
        )
        group.files.append(
            FileInfo(
                path=str(path),
                invalidated=bool(header.get("invalidated")),
                spool=group.spool,
                offset=offset,
                length=length,
            )
        )
        file_index = len(group.files) - 1
        for row, member, error, completed_at in records:
            offset, length = group.spool.put((dumps(row), member))
            record = Record(
                file=file_index,
                sample_id=row["id"],
                epoch=int(row["epoch"]),
                error=error,
                completed_at=completed_at,
                spool=group.spool,
                offset=offset,
                length=length,
            )
            rkey = (str(record.sample_id), record.epoch)
            current = group.records.get(rkey)
            if current is None:
                group.records[rkey] = record
            else:
                group.duplicates_dropped += 1
                if better(record, current):
                    group.records[rkey] = record
    return list(groups.values())
