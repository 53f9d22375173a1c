"""Low-level zip helpers for Inspect `.eval` logs.

An `.eval` log is a zip whose entries are zstd-compressed (method 93). Inspect's zip
support (private, through ct_fleet/inspect_private.py) teaches the stdlib `zipfile` to
read and write that method. On top of it this module adds what the merge needs and
`zipfile` lacks: copying an entry's *compressed* bytes from one archive into another
without inflating them (`copy_raw_member`), and writing an entry from a stream of
chunks.

`copy_raw_member` uses `zipfile.ZipFile` internals (`fp`, `_lock`, `_writing`,
`_writecheck`, `filelist`, `NameToInfo`, `start_dir`, `_didModify`), the same ones
`ZipFile.open(..., "w")` uses; `ZipFile.close()` then writes a normal central directory
(with zip64 records when offsets or counts need them). `open_flat_writer` keeps the
entries' infos for that central directory in a temporary file instead of in memory.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..inspect_private import MultiFrameZstdCompressObj, zipfile_compress_kwargs

__all__ = [
    "RawMember",
    "copy_raw_member",
    "live_infos",
    "open_flat_writer",
    "open_writer",
    "read_json",
    "write_member",
    "write_member_chunks",
    "zipfile_compress_kwargs",
]

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # 30 bytes
_LOCAL_SIGNATURE = b"PK\x03\x04"
_DATA_DESCRIPTOR_FLAG = 0x08
_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RawMember:
    """Where one entry's compressed bytes live in a source archive, and how to describe them."""

    name: str
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    crc: int
    date_time: tuple[int, int, int, int, int, int]
    external_attr: int
    create_system: int

    @classmethod
    def from_info(cls, info: zipfile.ZipInfo) -> RawMember:
        return cls(
            name=info.filename,
            header_offset=info.header_offset,
            compress_type=info.compress_type,
            compress_size=info.compress_size,
            file_size=info.file_size,
            crc=info.CRC,
            date_time=tuple(info.date_time),  # type: ignore[arg-type]
            external_attr=info.external_attr,
            create_system=info.create_system,
        )


def live_infos(zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Each name's last entry (a re-written name supersedes earlier ones), in first-seen order."""
    infos: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        infos[info.filename] = info
    return infos


def read_json(zf: zipfile.ZipFile, name: str) -> Any:
    with zf.open(name, "r") as f:
        return json.load(f)


def open_writer(file: str | BinaryIO) -> zipfile.ZipFile:
    """A new archive whose written entries are zstd-compressed like Inspect's."""
    return zipfile.ZipFile(file, "w", allowZip64=True, **zipfile_compress_kwargs)


class _SpooledInfos:
    """A writer's `filelist` in a temporary file: the central directory needs every
    entry's info at close, and 100,000 ZipInfo objects held in memory are ~40 MB."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="ct-fleet-zipinfo-")
        self._count = 0

    def append(self, info: zipfile.ZipInfo) -> None:
        self._file.seek(0, os.SEEK_END)
        pickle.dump(info, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[zipfile.ZipInfo]:
        self._file.seek(0)
        for _ in range(self._count):
            yield pickle.load(self._file)

    def close(self) -> None:
        self._file.close()


class _NoIndex(dict[str, zipfile.ZipInfo]):
    """A writer's `NameToInfo` that keeps nothing (it only warns about duplicate names,
    which the merge never writes)."""

    def __setitem__(self, key: str, value: zipfile.ZipInfo) -> None:
        pass


class _FlatWriter(zipfile.ZipFile):
    def close(self) -> None:
        try:
            super().close()
        finally:
            infos = self.filelist
            if isinstance(infos, _SpooledInfos):
                infos.close()


def open_flat_writer(file: BinaryIO) -> zipfile.ZipFile:
    """Like open_writer, with memory that does not grow with the number of entries.

    Relies on ZipFile (3.11) touching `filelist` only through append, len and iteration
    and `NameToInfo` only to look up and store names when it writes.
    """
    zf = _FlatWriter(file, "w", allowZip64=True, **zipfile_compress_kwargs)
    zf.filelist = _SpooledInfos()  # type: ignore[assignment]
    zf.NameToInfo = _NoIndex()
    return zf


DateTime = tuple[int, int, int, int, int, int]


def _new_info(name: str, date_time: DateTime | None = None) -> zipfile.ZipInfo:
    if date_time is None:
        now = time.localtime(time.time())
        date_time = (now.tm_year, now.tm_mon, now.tm_mday, now.tm_hour, now.tm_min, now.tm_sec)
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.compress_type = zipfile_compress_kwargs["compression"]
    info.external_attr = 0o600 << 16
    return info


def write_member(dst: zipfile.ZipFile, name: str, data: bytes, date_time: DateTime | None = None) -> None:
    """Write one compressed entry from bytes, stamped `date_time` (default: now)."""
    dst.writestr(_new_info(name, date_time), data)


def _single_threaded_zstd() -> Any:
    """A compressobj like Inspect's (zstd level 3, frames of at most 200 MiB of input)
    without its 12 threads: multi-threaded zstd holds most of a long stream's input in
    memory until it flushes (~90 MB for 100,000 summaries); one thread holds a window."""
    import zstandard

    return MultiFrameZstdCompressObj(zstandard.ZstdCompressor(level=3, threads=0).compressobj)


def write_member_chunks(
    dst: zipfile.ZipFile,
    name: str,
    chunks: Iterable[bytes],
    date_time: DateTime | None = None,
    *,
    zip64: bool = True,
) -> None:
    """Write one compressed entry from a stream of chunks (never all in memory), stamped
    `date_time` (default: now); `zip64=False` for an entry known to stay under 4 GiB, framed
    as `write_member` frames it."""
    with dst.open(_new_info(name, date_time), "w", force_zip64=zip64) as out:
        # Swapped before the first write (`_ZipWriteFile._compressor`, zipfile internals
        # like those above): the entry is zstd frames either way.
        out._compressor = _single_threaded_zstd()  # type: ignore[attr-defined]
        buf: list[bytes] = []
        size = 0
        for chunk in chunks:
            buf.append(chunk)
            size += len(chunk)
            if size >= _CHUNK:
                out.write(b"".join(buf))
                buf, size = [], 0
        if buf:
            out.write(b"".join(buf))


def _data_offset(src: BinaryIO, member: RawMember) -> int:
    src.seek(member.header_offset)
    header = src.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
        raise zipfile.BadZipFile(f"bad local header for {member.name!r}")
    fields = _LOCAL_HEADER.unpack(header)
    name_length: int = fields[-2]
    extra_length: int = fields[-1]
    return member.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def copy_raw_member(
    dst: zipfile.ZipFile,
    src: BinaryIO,
    member: RawMember,
    arcname: str | None = None,
) -> None:
    """Append `member`'s compressed bytes from the open source file `src` to `dst` as-is.

    The CRC, sizes and compression method are carried over from the source's central
    directory, so readers verify the copy exactly as they verified the original.
    """
    info = zipfile.ZipInfo(arcname or member.name, date_time=member.date_time)
    info.compress_type = member.compress_type
    info.CRC = member.crc
    info.compress_size = member.compress_size
    info.file_size = member.file_size
    info.external_attr = member.external_attr
    info.create_system = member.create_system
    info.flag_bits = 0  # sizes go in the local header: no data descriptor
    info.extra = b""

    start = _data_offset(src, member)
    src.seek(start)

    if dst.fp is None:
        raise ValueError("Attempt to write to ZIP archive that was already closed")
    if dst._writing:  # type: ignore[attr-defined]
        raise ValueError("Can't write to ZIP archive while an open writing handle exists")
    with dst._lock:  # type: ignore[attr-defined]
        dst._writecheck(info)  # type: ignore[attr-defined]
        dst._didModify = True  # type: ignore[attr-defined]
        zip64 = info.file_size > zipfile.ZIP64_LIMIT or info.compress_size > zipfile.ZIP64_LIMIT
        info.header_offset = dst.fp.tell()
        dst.fp.write(info.FileHeader(zip64))
        remaining = member.compress_size
        while remaining > 0:
            chunk = src.read(min(_CHUNK, remaining))
            if not chunk:
                raise zipfile.BadZipFile(f"truncated data for {member.name!r}")
            dst.fp.write(chunk)
            remaining -= len(chunk)
        dst.filelist.append(info)
        dst.NameToInfo[info.filename] = info
        dst.start_dir = dst.fp.tell()
