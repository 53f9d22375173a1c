"""Reading a small `.eval` zip with one read and one shared zstd decompressor.

The merge reads three entries of every input (header, summaries, the sample) and
`zipfile.ZipFile` costs more than the reading itself: it seeks and reads the directory
piecewise, builds a ZipInfo per entry, and inspect_ai's zipfile support sets up a new zstd
decompressor for every entry read. `EvalZip` reads a file of up to WHOLE bytes at once,
parses its central directory with `struct`, and inflates entries with one decompressor
per thread, checking sizes and CRC as zipfile does.

It only takes the common case: one disk, no zip64, no encryption, an entry in one zstd
frame (or stored, or deflated). Anything else, and any doubt (a size or CRC that does not
match, a local header that disagrees with the directory), is handed to `zipfile` on the
same file, so what a read returns or raises is what zipfile's would. An entry too large to
hold, or a bomb, is refused before it is inflated (entries.py).
"""

from __future__ import annotations

import os
import struct
import threading
import zipfile
import zlib
from typing import Any

import zstandard

from . import entries
from .entries import BadEntry, read_entry, refusal
from .zipio import RawMember, live_infos

WHOLE = 1 << 20  # files up to this size are read in one go; larger ones entry by entry

_EOCD = struct.Struct("<4s4H2LH")  # 22 bytes
_EOCD_SIG = b"PK\x05\x06"
_CDIR = struct.Struct("<4s4B4HL2L5H2L")  # 46 bytes
_CDIR_SIG = b"PK\x01\x02"
_LOCAL = struct.Struct("<4s2B4HL2L2H")  # 30 bytes
_LOCAL_SIG = b"PK\x03\x04"
_MAX_COMMENT = 0xFFFF
_ZSTD = 93
_FLAG_ENCRYPTED = 0x1
_FLAG_UTF8 = 0x800

_local = threading.local()


def _zstd() -> Any:
    """One decompressor per thread (a new one per entry costs more than a small entry; one
    instance must not be used by two threads at once, and the live merge has its own)."""
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


class _Unsure(Exception):
    """The fast path does not take this archive or entry: ask zipfile."""


_Fields = tuple[int, int, int, int, int, tuple[int, int, int, int, int, int], int, int]


class EvalZip:
    """One archive's live entries (the last of each name, in first-seen order)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self._zf: zipfile.ZipFile | None = None
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            self._data: bytes | None = fh.read() if size <= WHOLE else None
            tail = self._data if self._data is not None else _tail(fh, size)
            try:
                self.entries = self._directory(fh, tail, size)
            except _Unsure:
                self.entries = {
                    name: (
                        info.header_offset,
                        info.compress_type,
                        info.compress_size,
                        info.file_size,
                        info.CRC,
                        info.date_time,
                        info.external_attr,
                        info.create_system,
                    )
                    for name, info in live_infos(self._zipfile()).items()
                }

    def close(self) -> None:
        if self._zf is not None:
            self._zf.close()
            self._zf = None

    def __enter__(self) -> EvalZip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _zipfile(self) -> zipfile.ZipFile:
        if self._zf is None:
            self._zf = zipfile.ZipFile(self.path)
        return self._zf

    def member(self, name: str) -> RawMember:
        """Where the entry's compressed bytes are, for copying them raw."""
        return RawMember(name, *self.entries[name])

    def _directory(self, fh: Any, tail: bytes, size: int) -> dict[str, _Fields]:
        at = tail.rfind(_EOCD_SIG, max(0, len(tail) - _EOCD.size - _MAX_COMMENT))
        if at < 0 or len(tail) - at < _EOCD.size:
            raise _Unsure
        _, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, comment = _EOCD.unpack_from(tail, at)
        eocd_pos = size - (len(tail) - at)
        if (
            disk
            or cd_disk
            or n_disk != n_total
            or at + _EOCD.size + comment != len(tail)
            or cd_offset + cd_size != eocd_pos  # zip64, or bytes prepended to the zip
            or 0xFFFF in (n_disk, n_total)
        ):
            raise _Unsure
        cd = self._read(fh, cd_offset, cd_size)
        entries: dict[str, _Fields] = {}
        pos = 0
        for _ in range(n_total):
            f = _CDIR.unpack_from(cd, pos)
            if f[0] != _CDIR_SIG:
                raise _Unsure
            flags, method, time, date, crc, csize, usize = f[5], f[6], f[7], f[8], f[9], f[10], f[11]
            n_name, n_extra, n_comment = f[12], f[13], f[14]
            offset = f[18]
            raw_name = cd[pos + _CDIR.size : pos + _CDIR.size + n_name]
            pos += _CDIR.size + n_name + n_extra + n_comment
            if flags & _FLAG_ENCRYPTED or 0xFFFFFFFF in (csize, usize, offset):
                raise _Unsure
            name = raw_name.decode("utf-8" if flags & _FLAG_UTF8 else "cp437")
            if "\0" in name:  # zipfile truncates such names: let it
                raise _Unsure
            date_time = (
                (date >> 9) + 1980,
                (date >> 5) & 0xF,
                date & 0x1F,
                time >> 11,
                (time >> 5) & 0x3F,
                (time & 0x1F) * 2,
            )
            entries[name] = (offset, method, csize, usize, crc, date_time, f[17], f[2])
        if pos != cd_size:
            raise _Unsure
        return entries

    def _read(self, fh: Any, offset: int, length: int) -> bytes:
        if self._data is not None:
            data = self._data[offset : offset + length]
        else:
            fh.seek(offset)
            data = fh.read(length)
        if len(data) != length:
            raise _Unsure
        return data

    def read(self, name: str) -> bytes:
        """The entry's bytes, inflated and checked; KeyError if there is no such entry,
        BadEntry if it is too large to hold or a bomb (entries.py)."""
        member = self.member(name)
        why = refusal(name, member.file_size, member.compress_size, entries.WHOLE)
        if why is not None:
            raise BadEntry(why)
        try:
            return self._fast(member)
        except _Unsure:
            return read_entry(self._zipfile(), name)  # the last entry of a name, as zipfile's

    def _fast(self, m: RawMember) -> bytes:
        if self._data is None:
            with open(self.path, "rb") as fh:
                head = self._read(fh, m.header_offset, _LOCAL.size)
                fields = _LOCAL.unpack(head)
                start = m.header_offset + _LOCAL.size + fields[-2] + fields[-1]
                name = self._read(fh, m.header_offset + _LOCAL.size, fields[-2])
                comp = self._read(fh, start, m.compress_size)
        else:
            fields = _LOCAL.unpack_from(self._data, m.header_offset)
            start = m.header_offset + _LOCAL.size + fields[-2] + fields[-1]
            name = self._data[m.header_offset + _LOCAL.size : m.header_offset + _LOCAL.size + fields[-2]]
            comp = self._read(None, start, m.compress_size)
        if fields[0] != _LOCAL_SIG or name != m.name.encode("utf-8" if fields[3] & _FLAG_UTF8 else "cp437"):
            raise _Unsure
        try:
            if m.compress_type == _ZSTD and m.file_size:
                data: bytes = _zstd().decompress(comp, max_output_size=m.file_size)
            elif m.compress_type == zipfile.ZIP_STORED:
                data = comp
            elif m.compress_type == zipfile.ZIP_DEFLATED:
                inflate = zlib.decompressobj(-15)
                data = inflate.decompress(comp) + inflate.flush()
            else:
                raise _Unsure
        except (zstandard.ZstdError, zlib.error):
            raise _Unsure from None
        if len(data) != m.file_size or zlib.crc32(data) != m.crc:
            raise _Unsure  # more than one frame, or damage: zipfile decides
        return data


def _tail(fh: Any, size: int) -> bytes:
    n = min(size, _EOCD.size + _MAX_COMMENT)
    fh.seek(size - n)
    data: bytes = fh.read(n)
    return data
