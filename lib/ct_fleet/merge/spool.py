"""The merge's spool: one sqlite database in a temporary directory, so that the merge's
memory stays flat however many inputs it reads.

A spool outlives one write: a run's live merge feeds it only the results that are new
since its last look and writes from it again (merge/pipeline.py's `Merger`). Whatever
order the inputs arrive in, what is written is what one pass over them sorted by path
gives: ties go to the smaller path, files are read back in path order.

Tables (all per spool, deleted with it):
- inputs(path, size, mtime, ino): every input once, as it was when read, keyed by its
  path's bytes (the file-system encoding: code-point order, as Python's sorted() gives).
  An input that changed or went since is the caller's cue to start again.
- skipped(path, why): the inputs that are not readable logs, heard of on every merge.
- files(idx, grp, path, invalidated, stats): one row per usable input, with its stats,
  read only when some input contributes no kept sample (merge/header.py; otherwise the
  header takes the running totals of pass 1).
- records(grp, sid, epoch, ...): one row per kept (task group, str(sample id), epoch).
- reduced(name, view, ...): each sample's reduced scores (merge/reduced.py).
  A duplicate replaces the row only when it is better (no error beats an error, then the
  newer completed_at, then the smaller path), in one upsert.

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
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..evallog.zipio import RawMember
from ..tempdirs import owned_tempdir
from .spool_rows import Kept, id_order, member_blob, micros, stat_key, typed_id, untyped_id

_SCHEMA = """
CREATE TABLE inputs (path BLOB PRIMARY KEY, size INTEGER, mtime INTEGER, ino INTEGER) WITHOUT ROWID;
CREATE TABLE skipped (path TEXT PRIMARY KEY, why TEXT NOT NULL) WITHOUT ROWID;
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
CREATE TEMP TABLE current (
    path BLOB PRIMARY KEY, size INTEGER, mtime INTEGER, ino INTEGER, new INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
"""

_UPSERT = """
INSERT INTO records (grp, sid, epoch, sample_id, file, ok, completed, error, summary, member)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (grp, sid, epoch) DO UPDATE SET
    sample_id = excluded.sample_id, file = excluded.file, ok = excluded.ok,
    completed = excluded.completed, error = excluded.error, summary = excluded.summary,
    member = excluded.member
WHERE (excluded.ok, excluded.completed) > (records.ok, records.completed)
   OR ((excluded.ok, excluded.completed) = (records.ok, records.completed)
       AND (SELECT path FROM files WHERE idx = excluded.file) < (SELECT path FROM files WHERE idx = records.file))
"""

# An input known to the spool that is no longer as it was read (or is gone)
_CHANGED = """
SELECT EXISTS (
    SELECT 1 FROM inputs i LEFT JOIN temp.current c ON c.path = i.path
    WHERE c.path IS NULL OR c.size IS NOT i.size OR c.mtime IS NOT i.mtime OR c.ino IS NOT i.ino
)
"""

# the page cache's size: the records' index stays in it, the rows go to disk
_CACHE_KIB = 8 * 1024
_BATCH = 512  # rows sent to sqlite per call


class Spool:
    def __init__(self) -> None:
        self._dir = str(owned_tempdir("merge"))  # a killed merger's is swept by the next one
        # One thread at a time, but not always the same one: a run's live-merge thread
        # feeds it, then the end of run, on the main thread, completes the merge.
        self.db = sqlite3.connect(
            os.path.join(self._dir, "spool.sqlite"), isolation_level=None, check_same_thread=False
        )
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "temp_store = FILE", f"cache_size = -{_CACHE_KIB}"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.create_function("id_order", 1, id_order, deterministic=True)
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
    def new_inputs(self, inputs: Iterable[Path | str]) -> Iterator[Path] | None:
        """The inputs the spool has not read yet, each once, sorted by path, without a list
        of them in memory; None when one it has read changed or went since (start again).

        Each yielded input counts as read: a caller that stops early must start again."""
        self._flush()
        self.db.execute("DELETE FROM temp.current")
        self.db.executemany(
            "INSERT OR IGNORE INTO temp.current (path, size, mtime, ino) VALUES (?, ?, ?, ?)",
            (stat_key(p) for p in inputs),
        )
        if self.db.execute(_CHANGED).fetchone()[0]:
            return None
        self.db.execute("UPDATE temp.current SET new = 1 WHERE path NOT IN (SELECT path FROM inputs)")
        return self._read_new()

    def _read_new(self) -> Iterator[Path]:
        query = "SELECT path, size, mtime, ino FROM temp.current WHERE new = 1 ORDER BY path"
        for row in self.db.execute(query):
            self.db.execute("INSERT INTO inputs VALUES (?, ?, ?, ?)", row)
            yield Path(os.fsdecode(row[0]))

    def add_skipped(self, path: Path, why: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO skipped VALUES (?, ?)", (str(path), why))

    def skipped(self) -> Iterator[tuple[Path, str]]:
        """The inputs that are not readable logs, with why, in path order."""
        for path, why in self.db.execute("SELECT path, why FROM skipped ORDER BY path"):
            yield Path(path), why

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
                typed_id(sample_id),
                file,
                int(error is None),
                micros(completed),
                error,
                summary,
                member_blob(member),
            )
        )
        if len(self._records) >= _BATCH:
            self._flush()

    # -- queries of one group ------------------------------------------------------------
    def select(self, grp: int, sample_ids: Iterable[str | int] | None) -> int:
        """Fill `intended`, for the queries below, with the group's selection in dataset
        order, and say how many ids it holds: a table, not a list in memory.

        `sample_ids` without repeats (by str value; the first stays), each with the type it
        was seen with in the group, else as given. None: every id seen in the group, ints by
        value, then strs."""
        self._flush()
        self.db.execute("DELETE FROM intended")
        if sample_ids is None:
            self.db.execute(
                """
                INSERT INTO intended (sid, sample_id)
                SELECT sid, typed FROM (SELECT sid, MIN(sample_id) AS typed FROM records WHERE grp = ? GROUP BY sid)
                ORDER BY id_order(typed), sid
                """,
                (grp,),
            )
        else:
            self.db.executemany(
                "INSERT OR IGNORE INTO intended (sid, sample_id) VALUES (?, ?)",
                ((str(sid), typed_id(sid)) for sid in sample_ids),
            )
            self.db.execute(
                """
                UPDATE intended SET sample_id = (SELECT MIN(r.sample_id) FROM records r WHERE r.grp = ? AND r.sid = intended.sid)
                WHERE sid IN (SELECT sid FROM records WHERE grp = ?)
                """,
                (grp, grp),
            )
        (count,) = self.db.execute("SELECT COUNT(*) FROM intended").fetchone()
        return int(count)

    def intended(self, *, typed: bool = True) -> Iterator[list[Any]]:
        """The intended ids in dataset order, a batch at a time: as typed (str or int), or
        as their str values."""
        column = "sample_id" if typed else "sid"
        rows = self.db.execute(f"SELECT {column} FROM intended ORDER BY pos")
        while batch := rows.fetchmany(_BATCH):
            yield [untyped_id(value) for (value,) in batch] if typed else [value for (value,) in batch]

    def max_epoch(self, grp: int) -> int | None:
        self._flush()
        (value,) = self.db.execute("SELECT MAX(epoch) FROM records WHERE grp = ?", (grp,)).fetchone()
        return int(value) if value is not None else None

    def count_records(self, grp: int) -> int:
        self._flush()
        (value,) = self.db.execute("SELECT COUNT(*) FROM records WHERE grp = ?", (grp,)).fetchone()
        return int(value)

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
                yield Kept(untyped_id(typed), ep, error, path, summ, member)

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
            yield pos, untyped_id(typed), epoch, error, summary

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
                yield untyped_id(typed), epoch

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
                yield untyped_id(typed), epoch, error or ""

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
                "SELECT f.invalidated, f.stats FROM files f JOIN temp.contributing c ON c.idx = f.idx ORDER BY f.path"
            )
            rows = self.db.execute(query)
        else:
            rows = self.db.execute("SELECT invalidated, stats FROM files WHERE grp = ? ORDER BY path", (grp,))
        for invalidated, stats in rows:
            yield bool(invalidated), pickle.loads(stats)
