"""evallog.reader.EvalZip against zipfile itself: the same entries, bytes and errors.

Archives are written with the stdlib zipfile (zstd through Inspect's support, as Inspect
writes them, and the other methods and shapes a file could have); each is read with
zipfile and with EvalZip, in memory and entry by entry (files over WHOLE bytes).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
import zstandard

from ct_fleet.evallog import reader, zipio
from ct_fleet.evallog.reader import EvalZip

ENTRIES = {
    "_journal/start.json": b'{"version":2}',
    "samples/a\u00e9_epoch_1.json": b'{"id":"a\\u00e9","epoch":1,"x":"' + b"y" * 5000 + b'"}',
    "summaries.json": b"[]",
    "empty.json": b"",
    "header.json": b'{"eval":{"task":"t"}}',
}


def write(path: Path, method: int = zipio.zipfile_compress_kwargs["compression"], **kw: object) -> Path:
    with zipfile.ZipFile(path, "w", compression=method, **kw) as zf:  # type: ignore[arg-type]
        for name, data in ENTRIES.items():
            zf.writestr(name, data)
    return path


def both(path: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        want = {name: zf.read(info) for name, info in zipio.live_infos(zf).items()}
    with EvalZip(path) as ez:
        got = {name: ez.read(name) for name in ez.entries}
        with zipfile.ZipFile(path) as zf:
            for name, info in zipio.live_infos(zf).items():
                assert ez.member(name) == zipio.RawMember.from_info(info), name
    return want, got


@pytest.fixture(params=["whole", "by entry"])
def whole(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "by entry":
        monkeypatch.setattr(reader, "WHOLE", 0)
    return str(request.param)


@pytest.mark.parametrize(
    "method", [zipio.zipfile_compress_kwargs["compression"], zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]
)
def test_same_entries_and_bytes_as_zipfile(tmp_path: Path, method: int, whole: str) -> None:
    want, got = both(write(tmp_path / "a.eval", method))
    assert list(got) == list(want) == list(ENTRIES)
    assert got == want == ENTRIES


def test_inspect_written_archive(tmp_path: Path, whole: str) -> None:
    path = tmp_path / "i.eval"
    with open(path, "wb") as fh, zipio.open_writer(fh) as zf:
        for name, data in ENTRIES.items():
            zipio.write_member(zf, name, data)
    want, got = both(path)
    assert got == want == ENTRIES


def test_rewritten_name_keeps_the_last(tmp_path: Path, whole: str) -> None:
    path = write(tmp_path / "a.eval")
    with pytest.warns(UserWarning), zipfile.ZipFile(path, "a") as zf:
        zf.writestr("header.json", b'{"eval":{"task":"later"}}')
    want, got = both(path)
    assert got == want and got["header.json"] == b'{"eval":{"task":"later"}}'


def test_shapes_the_fast_path_leaves_to_zipfile(tmp_path: Path, whole: str) -> None:
    """A comment, bytes before the zip, zip64 records, several zstd frames: same answers."""
    commented = write(tmp_path / "c.eval")
    with zipfile.ZipFile(commented, "a") as zf:
        zf.comment = b"a comment"
    prefixed = tmp_path / "p.eval"
    prefixed.write_bytes(b"#!junk before the archive\n" + write(tmp_path / "x.eval").read_bytes())
    zip64 = tmp_path / "z.eval"
    with zipfile.ZipFile(zip64, "w", **zipio.zipfile_compress_kwargs) as zf:  # type: ignore[arg-type]
        for name, data in ENTRIES.items():
            with zf.open(name, "w", force_zip64=True) as out:
                out.write(data)
    frames = tmp_path / "f.eval"
    compressor = zstandard.ZstdCompressor(level=3)
    two_frames = compressor.compress(b'{"a":') + compressor.compress(b"1}")
    with zipfile.ZipFile(frames, "w", **zipio.zipfile_compress_kwargs) as zf:  # type: ignore[arg-type]
        zf.writestr("header.json", b"")
    _replace_entry(frames, "header.json", two_frames, b'{"a":1}')
    for path in (commented, prefixed, zip64):
        want, got = both(path)
        assert got == want == ENTRIES, path.name
    want, got = both(frames)
    assert got == want == {"header.json": b'{"a":1}'}


def test_damage_raises_as_zipfile_does(tmp_path: Path, whole: str) -> None:
    path = write(tmp_path / "a.eval")
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("samples/a\u00e9_epoch_1.json")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as zf, pytest.raises(Exception) as want:
        zf.read(info.filename)
    with EvalZip(path) as ez, pytest.raises(Exception) as got:
        ez.read(info.filename)
    assert isinstance(got.value, type(want.value))  # entries.BadEntry is a BadZipFile
    with EvalZip(path) as ez:  # the other entries still read
        assert ez.read("header.json") == ENTRIES["header.json"]


def test_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "n.eval"
    path.write_bytes(b"PK\x03\x04 but nothing else")
    with pytest.raises(zipfile.BadZipFile):
        EvalZip(path)
    with pytest.raises(KeyError):
        EvalZip(write(tmp_path / "a.eval")).read("missing.json")


def _replace_entry(path: Path, name: str, compressed: bytes, plain: bytes) -> None:
    """Rewrite a one-entry archive so that `name` holds `compressed` (several zstd frames)."""
    import zlib

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        info.compress_type = zipio.zipfile_compress_kwargs["compression"]
        info.CRC = zlib.crc32(plain)
        info.compress_size = len(compressed)
        info.file_size = len(plain)
        info.header_offset = 0
        zf.fp.write(info.FileHeader(False))  # type: ignore[union-attr]
        zf.fp.write(compressed)  # type: ignore[union-attr]
        zf.filelist.append(info)
        zf.NameToInfo[name] = info
        zf.start_dir = zf.fp.tell()  # type: ignore[union-attr]
        zf._didModify = True  # type: ignore[attr-defined]
    path.write_bytes(out.getvalue())
    assert os.path.getsize(path) > 0
