"""Secret values out of a result log before it leaves the worker.

A task's error (or a transcript) may quote a key the job could see: the sample's error is
the log's, so it would reach S3, the controller's disk, the merged log and the final line.
Every entry the worker can hold whole is searched, and the log is rewritten with the values
masked when one holds any (the other entries copied as they are). An entry too large to
hold (entries.WHOLE) is left as it is.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

from ..protocol.masking import mask
from .entries import WHOLE, read_entry


def mask_secrets(path: Path, secrets: Sequence[str]) -> list[str]:
    """Rewrite the log at `path` with `secrets` masked; the names of the entries that held one."""
    if not any(secrets):
        return []
    changed: dict[str, bytes] = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.file_size > WHOLE:
                continue
            text = read_entry(zf, info.filename).decode("utf-8", errors="surrogateescape")
            masked = mask(text, secrets)
            if masked != text:
                changed[info.filename] = masked.encode("utf-8", errors="surrogateescape")
    if not changed:
        return []
    from .zipio import RawMember, copy_raw_member, open_writer, write_member  # loads Inspect's zip support

    tmp = path.with_name(path.name + ".masking")
    with open(path, "rb") as src, zipfile.ZipFile(src) as zf, open_writer(str(tmp)) as out:
        for info in zf.infolist():
            if info.filename in changed:
                write_member(out, info.filename, changed[info.filename], date_time=info.date_time)
            else:
                copy_raw_member(out, src, RawMember.from_info(info))
    tmp.replace(path)
    return sorted(changed)
