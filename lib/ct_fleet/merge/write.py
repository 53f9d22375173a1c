"""Pass 2 of the merge: write the merged `.eval` (samples copied as compressed bytes)."""

from __future__ import annotations

import json
import os
import threading
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..evallog import zipio
from ..evallog.layout import HEADER_JSON, REDUCTIONS_JSON, START_JSON, SUMMARIES_JSON
from ..inspect_private import to_json_safe
from .header import SAMPLE_IDS
from .reduced import Reduction
from .scan import Group
from .spool import Spool
from .spool_rows import Kept
from .util import json_array, timestamp


def write_log(out_path: Path, header: Any, reductions: list[Reduction] | None, group: Group, epochs: int) -> None:
    """start.json, the samples' compressed bytes, summaries, reductions, header.json last;
    into a temporary file renamed into place. Samples and summaries stream from the spool."""
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    stamp = member_time(header)
    try:
        with open(tmp, "wb") as out_file, zipio.open_flat_writer(out_file) as out:
            start = {"version": header.version, "eval": header.eval, "plan": header.plan}
            write_with_ids(out, START_JSON, to_json_safe(start, indent=None), group.spool, stamp)
            copy_samples(out, group.spool.kept(group.index, epochs, with_summary=False))
            summaries = (k.summary for k in group.spool.kept(group.index, epochs))
            zipio.write_member_chunks(out, SUMMARIES_JSON, json_array(summaries), stamp)
            if reductions is not None:
                zipio.write_member_chunks(out, REDUCTIONS_JSON, reductions_json(reductions), stamp)
            write_with_ids(out, HEADER_JSON, to_json_safe(header, indent=None), group.spool, stamp)
            out.close()
            out_file.flush()
            os.fsync(out_file.fileno())
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)


def write_with_ids(out: zipfile.ZipFile, name: str, blob: bytes, spool: Spool, stamp: zipio.DateTime) -> None:
    """A header entry, with the intended ids where `SAMPLE_IDS` stands in its lists; each id
    as Inspect's JSON writes it."""
    placeholder = json.dumps(SAMPLE_IDS).encode()
    pieces = blob.split(placeholder)

    def chunks() -> Iterator[bytes]:
        for i, piece in enumerate(pieces):
            if i:
                for j, batch in enumerate(spool.intended()):
                    yield (b"," if j else b"") + to_json_safe(batch, indent=None)[1:-1]
            yield piece

    zipio.write_member_chunks(out, name, chunks(), stamp, zip64=False)


def member_time(header: Any) -> zipio.DateTime:
    """The time the merge's own entries carry: the merged run's completion (its wall clock as
    written), not the time of writing, so that the same results merge to the same bytes."""
    done = timestamp(header.stats.completed_at)
    if done.year < 1980:  # none recorded (or unreadable): the zip format's first day
        return (1980, 1, 1, 0, 0, 0)
    return (done.year, done.month, done.day, done.hour, done.minute, done.second)


def reductions_json(reductions: list[Reduction]) -> Iterator[bytes]:
    """reductions.json one sample's score at a time (one per sample per scorer and reducer:
    written whole, it is the merge's largest piece of JSON; the samples come from the spool)."""
    yield b"["
    for i, reduction in enumerate(reductions):
        head = to_json_safe(reduction.head, indent=None)
        assert head.endswith(b"[]}"), head[-20:]
        yield (b"," if i else b"") + head[: -len(b"[]}")]
        yield from json_array(to_json_safe(sample, indent=None) for sample in reduction.samples())
        yield b"}"
    yield b"]"


def copy_samples(out: zipfile.ZipFile, kept: Iterable[Kept]) -> None:
    src: BinaryIO | None = None
    src_path = ""
    try:
        for record in kept:
            if record.path != src_path:
                if src is not None:
                    src.close()
                src = open(record.path, "rb")  # closed in finally
                src_path = record.path
            assert src is not None
            zipio.copy_raw_member(out, src, record.member)
    finally:
        if src is not None:
            src.close()
