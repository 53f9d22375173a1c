"""Any log Inspect writes reads, and a result built to hurt the reader is refused.

Inspect writes an entry over 200 MiB as several zstd frames; here entries are built of
several small frames directly (the same bytes at a small scale), and read in a fresh
interpreter too, where Inspect's zip support is not loaded (the controller's case). A
bomb is refused by its declared size or ratio before it is inflated, and one that lies
about its size is stopped at that size: memory stays bounded either way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard

from ct_fleet.evallog import Expected, entries, problem, read_header, verify

HEADER = {"status": "success", "eval": {"task": "t"}}


def frames(data: bytes, size: int) -> bytes:
    """`data` as zstd frames of `size` input bytes each, as Inspect's writer cuts them."""
    cctx = zstandard.ZstdCompressor(level=3)
    return b"".join(cctx.compress(data[i : i + size]) for i in range(0, len(data), size))


def write_log(path: Path, sample: bytes, compressed: bytes | None = None, declared: int | None = None) -> Path:
    """A one-sample log whose sample entry holds `compressed` (default: `sample` in frames
    of 64 KiB), said to inflate to `declared` bytes (default: the truth)."""
    body = {
        "header.json": json.dumps(HEADER).encode(),
        "samples/s0_epoch_1.json": sample,
        "summaries.json": b'[{"id":"s0","epoch":1}]',
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, plain in body.items():
            data = compressed if compressed is not None and name.startswith("samples/") else frames(plain, 1 << 16)
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = 93
            info.CRC = zlib.crc32(plain)
            info.compress_size = len(data)
            info.file_size = declared if declared is not None and name.startswith("samples/") else len(plain)
            info.header_offset = zf.fp.tell()  # type: ignore[union-attr]
            zf.fp.write(info.FileHeader(False))  # type: ignore[union-attr]
            zf.fp.write(data)  # type: ignore[union-attr]
            zf.filelist.append(info)
            zf.NameToInfo[name] = info
            zf.start_dir = zf.fp.tell()  # type: ignore[union-attr]
            zf._didModify = True  # type: ignore[attr-defined]
    return path


def sample_of(size: int, sample_id: str = "s0") -> bytes:
    text = "".join(f"line {i} of the transcript; " for i in range(size // 25))
    return json.dumps({"id": sample_id, "epoch": 1, "output": text}).encode()


def problem_in_fresh_interpreter(path: Path) -> str:
    """What the controller says of the log: a process that has not loaded Inspect's zip support."""
    code = (
        "import sys; from ct_fleet.evallog import problem; "
        "assert 'inspect_ai' not in sys.modules; print(problem(__import__('pathlib').Path(sys.argv[1])))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_sample_in_several_zstd_frames_reads(tmp_path: Path) -> None:
    sample = sample_of(400_000)
    path = write_log(tmp_path / "multi.eval", sample)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("samples/s0_epoch_1.json")
        raw = path.read_bytes()[info.header_offset + 30 + len(info.filename) :][: info.compress_size]
    assert len(zstandard.ZstdDecompressor().decompressobj().decompress(raw)) < len(sample)  # not one frame
    assert problem(path) is None and problem(path, Expected("s0", 1, "t")) is None
    assert read_header(path) == HEADER
    assert problem_in_fresh_interpreter(path) == "None"
    with zipfile.ZipFile(path) as zf:
        assert b"".join(entries.chunks(zf, "samples/s0_epoch_1.json")) == sample


def test_a_sample_too_large_to_hold_is_parsed_as_a_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "WHOLE", 1000)
    good = write_log(tmp_path / "good.eval", sample_of(200_000))
    assert problem(good) is None
    other = write_log(tmp_path / "s1.eval", sample_of(200_000, "s1"))
    assert "holds sample s1 epoch 1, not s0 epoch 1" in str(problem(other, Expected("s0", 1, "t")))
    junk = sample_of(200_000)[:-1] + b',"more": not json}'  # junk after the id and epoch
    assert "corrupt content" in str(problem(write_log(tmp_path / "junk.eval", junk)))
    assert "not a sample" in str(problem(write_log(tmp_path / "list.eval", b"[" + sample_of(2000) + b"]")))


def _zeros_sample(size: int) -> tuple[bytes, bytes]:
    """A sample of `size` bytes of one letter, and its compressed form (a few KB)."""
    head, tail = b'{"id":"s0","epoch":1,"output":"', b'"}'
    plain = head + b"A" * (size - len(head) - len(tail)) + tail
    return plain, zstandard.ZstdCompressor(level=3).compress(plain)


def test_an_inflation_bomb_is_refused_without_being_inflated(tmp_path: Path) -> None:
    plain, packed = _zeros_sample(100 << 20)
    path = write_log(tmp_path / "bomb.eval", plain, packed)
    del plain
    tracemalloc.start()
    try:
        said = problem(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said is not None and "inflation bomb" in said, said
    assert peak < 8 << 20, peak


def test_a_bomb_that_lies_about_its_size_is_stopped_at_that_size(tmp_path: Path) -> None:
    plain, packed = _zeros_sample(100 << 20)
    path = write_log(tmp_path / "liar.eval", plain[:1000], packed, declared=1000)
    del plain
    tracemalloc.start()
    try:
        said = problem(path)
        head = read_header(write_log(tmp_path / "liar-header.eval", b"{}"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said is not None and "inflates past its declared 1,000 bytes" in said, said
    assert head == HEADER
    assert peak < 8 << 20, peak


def test_an_entry_over_the_size_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entries, "MAX_ENTRY", 100_000)
    said = problem(write_log(tmp_path / "big.eval", sample_of(200_000)))
    assert said is not None and "over the 100,000 read" in said
