"""What a worker changes in an Inspect job's log before it stores it.

- relabel_epoch: a worker cannot run "epoch k only": it runs the sample with epochs=1 and
  relabels the log, so the merged run holds every (sample, epoch).
- add_prior_time: Inspect's own retry writes a resumed sample's total_time and
  working_time for its last attempt alone, while it carries the sample's usage, and the
  clock behind each event's working_start, over from the checkpoint. The fleet adds the
  time the checkpoint held (the earlier attempts' time up to it), so the sample's time
  counts every attempt as its usage does.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from . import zipio
from .layout import JOURNAL_SUMMARIES, SAMPLE_NAME, SAMPLES_DIR, SUMMARIES_JSON, dumps
from .zipio import RawMember


def relabel_epoch(path: Path, epoch: int) -> None:
    """Make the epoch-1 sample(s) of the one-epoch log at `path` epoch `epoch`, in place.

    Renames `samples/{id}_epoch_1.json` to `samples/{id}_epoch_{epoch}.json`, sets
    `"epoch"` inside it and in `summaries.json` and the journal summaries; every other
    entry is copied byte for byte. Samples already at `epoch` are left alone, so a
    second call is a no-op; `epoch == 1` is a no-op.
    """
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    if epoch == 1:
        return
    path = Path(path)
    with open(path, "rb") as src, zipfile.ZipFile(src) as zf:
        infos = zipio.live_infos(zf)
        renames: dict[str, str] = {}
        for name in infos:
            m = SAMPLE_NAME.match(name)
            if not m:
                continue
            old = int(m.group("epoch"))
            if old == epoch:
                continue
            if old != 1:
                raise ValueError(f"{path}: {name} is epoch {old}; only epoch 1 can be relabelled")
            renames[name] = f"{SAMPLES_DIR}{m.group('id')}_epoch_{epoch}.json"
        if not renames:
            return
        clash = set(renames.values()) & (set(infos) - set(renames))
        if clash:
            raise ValueError(f"{path}: already holds {sorted(clash)}")

        _rewrite(
            path,
            src,
            zf,
            sample=lambda name, data: (renames[name], _patch_sample_epoch(data, 1, epoch, f"{path}:{name}")),
            samples=set(renames),
            row=lambda row: row.update(epoch=epoch) if row.get("epoch") == 1 else None,
        )


def add_prior_time(path: Path, wall: float, working: float) -> None:
    """Add WALL and WORKING seconds (the earlier attempts' time a resumed sample's
    checkpoint held) to the total_time and working_time of the one sample of the log at
    PATH, in place, in its sample entry and its summaries."""

    def add(entry: dict[str, Any]) -> None:
        for key, extra in (("total_time", wall), ("working_time", working)):
            if isinstance(entry.get(key), int | float):
                entry[key] = round(entry[key] + extra, 3)

    def sample(name: str, data: bytes) -> tuple[str, bytes]:
        entry = json.loads(data)
        add(entry)
        return name, dumps(entry)

    path = Path(path)
    with open(path, "rb") as src, zipfile.ZipFile(src) as zf:
        samples = {n for n in zipio.live_infos(zf) if SAMPLE_NAME.match(n)}
        _rewrite(path, src, zf, sample=sample, samples=samples, row=add)


def _rewrite(
    path: Path,
    src: BinaryIO,
    zf: zipfile.ZipFile,
    sample: Callable[[str, bytes], tuple[str, bytes]],
    samples: set[str],
    row: Callable[[dict[str, Any]], object],
) -> None:
    """Write the log at PATH again, in place: each entry in SAMPLES as `sample(name, data)`
    makes it (its new name and bytes), each summary row passed to `row` (which changes it
    in place), every other entry copied byte for byte."""
    tmp = path.with_name(f".{path.name}.rewrite-{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out_file, zipio.open_writer(out_file) as out:
            for name, info in zipio.live_infos(zf).items():
                if name in samples:
                    zipio.write_member(out, *sample(name, zf.read(info)))
                elif name == SUMMARIES_JSON or (name.startswith(JOURNAL_SUMMARIES) and name.endswith(".json")):
                    rows = json.loads(zf.read(info))
                    for each in rows:
                        row(each)
                    zipio.write_member(out, name, dumps(rows))
                else:
                    zipio.copy_raw_member(out, src, RawMember.from_info(info))
            out_file.flush()
            os.fsync(out_file.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _patch_sample_epoch(data: bytes, old: int, new: int, where: str) -> bytes:
    """Set a sample's top-level "epoch" without re-serialising the rest of it.

    Inspect serialises EvalSample with "id" then "epoch" first, so the common case is a
    textual edit right after the id; anything else falls back to a JSON round trip.
    """
    text = data.decode("utf-8")
    if text.startswith('{"id":'):
        try:
            _, end = json.JSONDecoder().raw_decode(text, 6)
        except ValueError:
            end = -1
        old_field = f',"epoch":{old},'
        if end > 0 and text.startswith(old_field, end):
            return (text[:end] + f',"epoch":{new},' + text[end + len(old_field) :]).encode()
    sample = json.loads(text)
    if sample.get("epoch") != old:
        raise ValueError(f"{where}: expected epoch {old}, found {sample.get('epoch')!r}")
    sample["epoch"] = new
    return dumps(sample)
