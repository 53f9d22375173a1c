"""How the spool keys and stores a record: sample ids with their type and in sorted()'s
order, timestamps as exact integers, an input's identity, a zip member as bytes."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..evallog.zipio import RawMember

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def typed_id(sample_id: str | int) -> bytes:
    """A sample id with its type (Inspect ids are str or int)."""
    return pickle.dumps(sample_id, protocol=pickle.HIGHEST_PROTOCOL)


def untyped_id(blob: bytes) -> str | int:
    value: str | int = pickle.loads(blob)
    return value


def id_order(typed: bytes) -> str:
    """A text key that sorts ids as sorted() sorts (0, int) and (1, str): ints first, by
    value (by how many digits, then the digits; negative ones reversed), then strs."""
    value = untyped_id(typed)
    if not isinstance(value, int):
        return "1" + value
    digits = str(abs(value))
    if value < 0:
        return f"0n{_MAX_DIGITS - len(digits):08d}{digits.translate(_NINES_COMPLEMENT)}"
    return f"0p{len(digits):08d}{digits}"


_MAX_DIGITS = 10**8 - 1
_NINES_COMPLEMENT = str.maketrans("0123456789", "9876543210")


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


def stat_key(path: Path | str) -> tuple[bytes, int | None, int | None, int | None]:
    """(path's bytes, size, mtime, inode) of an input; Nones for one that cannot be read
    (it is read anyway, and skipped as unreadable)."""
    path = path if isinstance(path, Path) else Path(path)  # Path() normalises a str ("a//b" is "a/b")
    try:
        st = path.stat()
    except OSError:
        return os.fsencode(path), None, None, None
    return os.fsencode(path), st.st_size, st.st_mtime_ns, st.st_ino


def member_blob(m: RawMember) -> bytes:
    """A RawMember's fields as a pickled tuple (a slotted dataclass pickles several times slower)."""
    fields = (m.name, m.header_offset, m.compress_type, m.compress_size, m.file_size, m.crc, m.date_time)
    return pickle.dumps((*fields, m.external_attr, m.create_system), protocol=pickle.HIGHEST_PROTOCOL)
