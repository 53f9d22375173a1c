"""One entry of an `.eval` zip read as Inspect writes it, in bounded memory.

Inspect writes an entry over 200 MiB as several zstd frames (inspect_ai._util.zipfile's
frame cap) and reads it back with a decompressor that crosses frames. `zipfile_zstd`
alone stops at the first frame (a valid 1 GB sample read as "Bad CRC-32"), and neither
bounds what one read inflates to. Results come from workers that run code we do not
control, so an entry is read here from its compressed bytes:

- its declared size and ratio are judged before anything is inflated (`refusal`): an
  inflation bomb is refused, never inflated;
- it is inflated as a stream across every frame, a chunk at a time, and never past its
  declared size; its CRC and size are checked at the end, as zipfile checks them.

No inspect_ai import (the controller reads results without loading Inspect).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

import zstandard

# An entry larger than this is not read (a sample of 1 GB counts; 8 GiB is no sample).
MAX_ENTRY = 8 << 30
# Inflating more than this many times its compressed size is a bomb, once it is big
# enough to matter (Inspect's JSON inflates 5-50 times; all-alike bytes, thousands).
BOMB_RATIO = 500
BOMB_FLOOR = 32 << 20
# What the caller holds whole (header.json, summaries, a small sample): parsed in memory.
WHOLE = 64 << 20

CHUNK = 1 << 20
_ZSTD = 93
_LOCAL = struct.Struct("<4s5H3L2H")  # 30 bytes
_LOCAL_SIG = b"PK\x03\x04"
_WINDOW = 1 << 27  # zstd's own default limit on a frame's window: a frame asking more is refused


class BadEntry(zipfile.BadZipFile):
    """The entry does not read, or is refused; the message says why (one line)."""


def refusal(name: str, file_size: int, compress_size: int, limit: int | None = None) -> str | None:
    """Why an entry of these declared sizes is not inflated at all, or None."""
    limit = MAX_ENTRY if limit is None else min(limit, MAX_ENTRY)
    if file_size > limit:
        return f"{name} inflates to {file_size:,} bytes, over the {limit:,} read"
    if file_size > BOMB_FLOOR and file_size > BOMB_RATIO * max(compress_size, 1):
        return (
            f"{name} inflates {file_size // max(compress_size, 1):,} times its size"
            f" ({compress_size:,} -> {file_size:,} bytes): refused as an inflation bomb"
        )
    return None


class _Slice(io.RawIOBase):
    """The compressed bytes of one entry, read from the archive's file."""

    def __init__(self, fh: IO[bytes], start: int, length: int) -> None:
        self._fh, self._pos, self._left = fh, start, length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        self._fh.seek(self._pos)
        data = self._fh.read(want)
        if not data:
            raise BadEntry("the archive ends inside an entry")
        n = len(data)
        buffer[:n] = data
        self._pos += n
        self._left -= n
        return n


class _Inflated(io.RawIOBase):
    """An entry's inflated bytes, checked against its declared size and CRC as they go."""

    def __init__(self, name: str, source: IO[bytes], info: zipfile.ZipInfo) -> None:
        self._name, self._info = name, info
        self._size = 0
        self._crc = 0
        method = info.compress_type
        self._source: Any
        self._inflate: Any = None
        if method == _ZSTD:
            dctx = zstandard.ZstdDecompressor(max_window_size=_WINDOW)
            self._source = dctx.stream_reader(source, read_size=CHUNK, read_across_frames=True, closefd=False)
        elif method == zipfile.ZIP_STORED:
            self._source = source
        elif method == zipfile.ZIP_DEFLATED:
            self._source, self._inflate, self._pending = source, zlib.decompressobj(-15), b""
        else:
            raise BadEntry(f"{name} has compression method {method}, not one Inspect writes")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._info.file_size - self._size + 1)  # one byte over says "too long"
        try:
            data = self._read(want)
        except (zstandard.ZstdError, zlib.error) as exc:
            raise BadEntry(f"{self._name} does not inflate ({exc})") from None
        n = len(data)
        if n == 0:
            if self._size != self._info.file_size:
                raise BadEntry(f"{self._name} inflates to {self._size:,} bytes, not {self._info.file_size:,}")
            if self._crc != self._info.CRC:
                raise BadEntry(f"Bad CRC-32 for file {self._name!r}")
            return 0
        self._size += n
        if self._size > self._info.file_size:
            raise BadEntry(f"{self._name} inflates past its declared {self._info.file_size:,} bytes")
        self._crc = zlib.crc32(data, self._crc)
        buffer[:n] = data
        return n

    def _read(self, want: int) -> bytes:
        if self._inflate is None:
            data: bytes = self._source.read(want)
            return data
        while True:  # deflate: never more out than asked, whatever the input
            out: bytes = self._inflate.decompress(self._pending, want)
            self._pending = self._inflate.unconsumed_tail
            if out or self._inflate.eof:
                return out
            self._pending = self._source.read(CHUNK)
            if not self._pending:
                return b""


def _data_offset(fh: IO[bytes], info: zipfile.ZipInfo) -> int:
    fh.seek(info.header_offset)
    head = fh.read(_LOCAL.size)
    if len(head) != _LOCAL.size or head[:4] != _LOCAL_SIG:
        raise BadEntry(f"{info.filename} has a bad local header")
    fields = _LOCAL.unpack(head)
    return int(info.header_offset + _LOCAL.size + fields[-2] + fields[-1])


def open_entry(zf: zipfile.ZipFile, name: str, limit: int | None = None) -> io.BufferedReader:
    """A stream of the entry's inflated bytes (BadEntry when it is refused, does not inflate,
    or its size or CRC is wrong; KeyError when there is no such entry). `zf` must be
    open on a file of its own (ZipFile(path) or ZipFile(fh)), not in use by another read."""
    info = zf.getinfo(name)
    why = refusal(name, info.file_size, info.compress_size, limit)
    if why is not None:
        raise BadEntry(why)
    fh = zf.fp
    if fh is None or info.flag_bits & 0x1:
        raise BadEntry(f"{name} is encrypted or its archive is closed")
    start = _data_offset(fh, info)
    raw = _Slice(fh, start, info.compress_size)
    return io.BufferedReader(_Inflated(name, raw, info), CHUNK)  # type: ignore[arg-type]


def read_entry(zf: zipfile.ZipFile, name: str, limit: int = WHOLE) -> bytes:
    """The entry's bytes, whole (for entries a caller parses in memory: at most `limit`)."""
    with open_entry(zf, name, limit) as fh:
        return fh.read()


def chunks(zf: zipfile.ZipFile, name: str) -> Iterator[bytes]:
    with open_entry(zf, name) as fh:
        while block := fh.read(CHUNK):
            yield block
