"""The merge's spool: one sqlite database in a temporary directory, so that the merge's
memory stays flat however many inputs it reads.

Tables (all per merge, deleted with it):
- inputs(path): every input path once, sorted by the database (bytes order of the
  file-system encoding, which is code-point order: the order Python's sorted() gives).
- files(idx, grp, path, invalidated, stats): one row per usable input, with its stats,
  read only when some input contributes no kept sample (merge/header.py; otherwise the
  header takes the running totals of pass 1).
- records(grp, sid, epoch, ...): one row per kept (task group, str(sample id), epoch).
- reduced(name, view, ...): each sample's reduced scores (merge/reduced.py).
  A duplicate replaces the row only when it is better (no error beats an error, then the
  newer completed_at; ties keep the first seen), in one upsert.

Queries that follow the intended ids use CROSS JOIN, which makes sqlite walk `intended`
in dataset order and look each record up by its key (a plain JOIN lets the planner scan
every record of the group once per epoch instead).

Python keeps only per-task state (a template header, counters) and, while the output is
written, rows streamed from queries: nothing here grows with the number of samples.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..evallog.zipio import RawMember

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_SCHEMA = """
CREATE TABLE inputs (path BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE files (
    idx INTEGER PRIMARY KEY,
    grp INTEGER NOT NULL,
    path TEXT NOT NULL,
    invalidated INTEGER NOT NULL,
    stats BLOB NOT NULL
);
CREATE TABLE records (
    grp INTEGER NOT NULL,
    sid TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    sample_id BLOB NOT NULL,
    file INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    error TEXT,
    summary BLOB NOT NULL,
    member BLOB NOT NULL
);
CREATE UNIQUE INDEX records_key ON records (grp, sid, epoch);
CREATE TEMP TABLE intended (pos INTEGER PRIMARY KEY, sid TEXT NOT NULL UNIQUE, sample_id BLOB NOT NULL);
"""

_UPSERT = """
INSERT INTO records (grp, sid, epoch, sample_id, file, ok, completed, error, summary, member)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (grp, sid, epoch) DO UPDATE SET
    sample_id = excluded.sample_id, file = excluded.file, ok = excluded.ok,
    completed = excluded.completed, error = excluded.error, summary = excluded.summary,
    member = excluded.member
WHERE (excluded.ok, excluded.completed) > (records.ok, records.completed)
"""

# the page cache's size: the records' index stays in it, the rows go to disk
_CACHE_KIB = 8 * 1024
_BATCH = 512  # rows sent to sqlite per call


def _typed(sample_id: str | int) -> bytes:
    """A sample id with its type (Inspect ids are str or int)."""
    return pickle.dumps(sample_id, protocol=pickle.HIGHEST_PROTOCOL)


def _untyped(blob: bytes) -> str | int:
    value: str | int = pickle.loads(blob)
    return value


def micros(ts: datetime) -> int:
    """A timestamp as integer microseconds: exact, and ordered as the datetimes are."""
    delta = ts - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True, slots=True)
class Kept:
    """One kept sample, as the writer and the results need it."""

    sample_id: str | int
    epoch: int
    error: str | None
    path: str
    summary: bytes  # compact JSON of the sample summary
    member_blob: bytes

    @property
    def member(self) -> RawMember:
        return RawMember(*pickle.loads(self.member_blob))


def _member_blob(m: RawMember) -> bytes:
    """A RawMember's fields as a pickled tuple (a slotted dataclass pickles several times slower)."""
    fields = (m.name, m.header_offset, m.compress_type, m.compress_size, m.file_size, m.crc, m.date_time)
    return pickle.dumps((*fields, m.external_attr, m.create_system), protocol=pickle.HIGHEST_PROTOCOL)


class Spool:
    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="ct-fleet-merge-")
        self.db = sqlite3.connect(os.path.join(self._dir, "spool.sqlite"), isolation_level=None)
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "temp_store = FILE", f"cache_size = -{_CACHE_KIB}"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.executescript(_SCHEMA)
        self.db.execute("BEGIN")
        self._files: list[tuple[Any, ...]] = []
        self._records: list[tuple[Any, ...]] = []
        self._next_file = 0

    def _flush(self) -> None:
        if self._files:
            self.db.executemany(
                "INSERT INTO files (idx, grp, path, invalidated, stats) VALUES (?, ?, ?, ?, ?)", self._files
            )
            self._files = []
        if self._records:
            self.db.executemany(_UPSERT, self._records)
            self._records = []

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- pass 1 ------------------------------------------------------------------------
    def sorted_inputs(self, inputs: Iterable[Path | str]) -> Iterator[Path]:
        """Each input once, sorted by path, without a list of them in memory."""
        # Path() normalises a str ("a//b" is "a/b"); a Path already is
        rows = ((os.fsencode(p if isinstance(p, Path) else Path(p)),) for p in inputs)
        self.db.executemany("INSERT OR IGNORE INTO inputs (path) VALUES (?)", rows)
        for (raw,) in self.db.execute("SELECT path FROM inputs ORDER BY path"):
            yield Path(os.fsdecode(raw))

    def add_file(self, grp: int, path: str, invalidated: bool, stats: dict[str, Any]) -> int:
        idx = self._next_file
        self._next_file += 1
        self._files.append((idx, grp, path, int(invalidated), pickle.dumps(stats, protocol=pickle.HIGHEST_PROTOCOL)))
        return idx

    def add_record(
        self,
        grp: int,
        sample_id: str | int,
        epoch: int,
        file: int,
        error: str | None,
        completed: datetime,
        summary: bytes,
        member: RawMember,
    ) -> None:
        self._records.append(
            (
                grp,
                str(sample_id),
                epoch,
                _typed(sample_id),
                file,
                int(error is None),
                micros(completed),
                error,
                summary,
                _member_blob(member),
            )
        )
        if len(self._records) >= _BATCH:
            self._flush()

    # -- queries of one group ------------------------------------------------------------
    def seen_ids(self, grp: int) -> Iterator[str | int]:
        """Every sample id of the group once, with its original type."""
        self._flush()
        for (typed,) in self.db.execute("SELECT MIN(sample_id) FROM records WHERE grp = ? GROUP BY sid", (grp,)):
            yield _untyped(typed)

    def typed_ids(self, grp: int, sample_ids: Iterable[str | int]) -> Iterator[str | int]:
        """`sample_ids` without repeats (by str value; the first stays), each with the
        type it was seen with in the group, else as given: a query, not a dict in memory."""
        self._flush()
        self.db.execute("DROP TABLE IF EXISTS temp.wanted")
        self.db.execute("CREATE TEMP TABLE wanted (pos INTEGER PRIMARY KEY, sid TEXT NOT NULL UNIQUE, given BLOB)")
        self.db.executemany(
            "INSERT OR IGNORE INTO temp.wanted (sid, given) VALUES (?, ?)",
            ((str(sid), _typed(sid)) for sid in sample_ids),
        )
        query = """
            SELECT w.given, (SELECT MIN(r.sample_id) FROM records r WHERE r.grp = ? AND r.sid = w.sid)
            FROM temp.wanted w ORDER BY w.pos
        """
        for given, seen in self.db.execute(query, (grp,)):
            yield _untyped(seen if seen is not None else given)

    def max_epoch(self, grp: int) -> int | None:
        self._flush()
        (value,) = self.db.execute("SELECT MAX(epoch) FROM records WHERE grp = ?", (grp,)).fetchone()
        return int(value) if value is not None else None

    def count_records(self, grp: int) -> int:
        self._flush()
        (value,) = self.db.execute("SELECT COUNT(*) FROM records WHERE grp = ?", (grp,)).fetchone()
        return int(value)

    def set_intended(self, ids: Iterable[str | int]) -> None:
        """The intended sample ids, in dataset order, for the queries below."""
        self._flush()
        self.db.execute("DELETE FROM intended")
        self.db.executemany(
            "INSERT INTO intended (pos, sid, sample_id) VALUES (?, ?, ?)",
            ((pos, str(sid), _typed(sid)) for pos, sid in enumerate(ids)),
        )

    def kept(self, grp: int, epochs: int, *, with_summary: bool = True) -> Iterator[Kept]:
        """The kept records in output order: epoch by epoch, each in dataset order."""
        self._flush()
        summary = "r.summary" if with_summary else "x''"
        query = f"""
            SELECT r.sample_id, r.epoch, r.error, f.path, {summary}, r.member
            FROM intended i
            CROSS JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch = ?
            CROSS JOIN files f ON f.idx = r.file
            ORDER BY i.pos
        """
        for epoch in range(1, epochs + 1):
            for typed, ep, error, path, summ, member in self.db.execute(query, (grp, epoch)):
                yield Kept(_untyped(typed), ep, error, path, summ, member)

    def kept_by_sample(self, grp: int, epochs: int) -> Iterator[tuple[int, str | int, int, str | None, bytes]]:
        """(dataset position, id, epoch, error, summary) of the kept records, sample by
        sample, each sample's epochs in order."""
        self._flush()
        query = """
            SELECT i.pos, r.sample_id, r.epoch, r.error, r.summary
            FROM intended i
            CROSS JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch BETWEEN 1 AND ?
            ORDER BY i.pos, r.epoch
        """
        for pos, typed, epoch, error, summary in self.db.execute(query, (grp, epochs)):
            yield pos, _untyped(typed), epoch, error, summary

    def count_kept(self, grp: int, epochs: int) -> tuple[int, int]:
        """(kept records, kept records with an error)."""
        self._flush()
        row = self.db.execute(
            """
            SELECT COUNT(*), COALESCE(SUM(1 - r.ok), 0)
            FROM intended i CROSS JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch BETWEEN 1 AND ?
            """,
            (grp, epochs),
        ).fetchone()
        return int(row[0]), int(row[1])

    def missing(self, grp: int, epochs: int) -> Iterator[tuple[str | int, int]]:
        """(id, epoch) of the intended samples without a record, in output order."""
        self._flush()
        query = """
            SELECT i.sample_id FROM intended i
            LEFT JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch = ?
            WHERE r.sid IS NULL ORDER BY i.pos
        """
        for epoch in range(1, epochs + 1):
            for (typed,) in self.db.execute(query, (grp, epoch)):
                yield _untyped(typed), epoch

    def errors(self, grp: int, epochs: int) -> Iterator[tuple[str | int, int, str]]:
        """(id, epoch, message) of the kept records with an error, in output order."""
        self._flush()
        query = """
            SELECT r.sample_id, r.error FROM intended i
            CROSS JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch = ?
            WHERE r.ok = 0 ORDER BY i.pos
        """
        for epoch in range(1, epochs + 1):
            for typed, error in self.db.execute(query, (grp, epoch)):
                yield _untyped(typed), epoch, error or ""

    def count_contributing(self, grp: int, epochs: int) -> int:
        """How many files a kept record comes from."""
        self._flush()
        (value,) = self.db.execute(
            """
            SELECT COUNT(DISTINCT r.file) FROM intended i
            CROSS JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch BETWEEN 1 AND ?
            """,
            (grp, epochs),
        ).fetchone()
        return int(value)

    def contributing_files(self, grp: int, epochs: int) -> Iterator[tuple[bool, dict[str, Any]]]:
        """(invalidated, stats) of the files a kept record comes from, else of every file
        of the group, in input order."""
        self._flush()
        self.db.execute("DROP TABLE IF EXISTS temp.contributing")
        self.db.execute(
            """
            CREATE TEMP TABLE contributing AS
            SELECT DISTINCT r.file AS idx FROM intended i
            CROSS JOIN records r ON r.grp = ? AND r.sid = i.sid AND r.epoch BETWEEN 1 AND ?
            """,
            (grp, epochs),
        )
        (some,) = self.db.execute("SELECT COUNT(*) FROM temp.contributing").fetchone()
        if some:
            query = (
                "SELECT f.invalidated, f.stats FROM files f JOIN temp.contributing c ON c.idx = f.idx ORDER BY f.idx"
            )
            rows = self.db.execute(query)
        else:
            rows = self.db.execute("SELECT invalidated, stats FROM files WHERE grp = ? ORDER BY idx", (grp,))
        for invalidated, stats in rows:
            yield bool(invalidated), pickle.loads(stats)
