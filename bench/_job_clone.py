"""Copies of one real fleet job log under other (sample id, epoch)s, for bench/merge.py.

A fleet job log (`runs/<fleet>/jobs/*.evaljob`) is what Inspect wrote for one sample x
one epoch on a worker, relabelled to its epoch. `JobLog.clone` writes a copy of it as
another job of the same task would have written it: every JSON entry (start, sample,
journal summaries, summaries, reductions, header) rewritten with the new sample id and
epoch, fresh eval, run and task ids, sample uuid, creation and start/end times, and
scores that differ from copy to copy (a pure function of the id and epoch), so that no
two copies share the strings or score objects the merge reads. Entries are compressed
with one-threaded zstd (readers cannot tell: the frames are ordinary zstd frames).

`worker_job_log()` makes such a log without a fleet: Inspect's own eval of one toyarena
smoke sample with epochs=1 and sample_id=[id], the way a worker runs a job (cached).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as c

from ct_fleet.evallog import zipio as evalzip
from ct_fleet.evallog.layout import SAMPLE_NAME


def _h(*parts: object) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16)


def _uuid(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:22]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class JobLog:
    """The decoded entries of one real one-sample job log."""

    entries: dict[str, Any]  # entry name -> decoded JSON, in archive order
    sample_name: str
    sample_id: str
    epoch: int
    uuid: str

    @classmethod
    def read(cls, path: Path) -> JobLog:
        with zipfile.ZipFile(path) as zf:
            entries = {n: json.loads(zf.read(n)) for n in evalzip.live_infos(zf)}
        [sample_name] = [n for n in entries if SAMPLE_NAME.match(n)]
        sample = entries[sample_name]
        return cls(entries, sample_name, str(sample["id"]), int(sample["epoch"]), str(sample["uuid"]))

    def _scores(self, scores: dict[str, Any], sid: str, epoch: int) -> dict[str, Any]:
        out = {}
        for i, (name, score) in enumerate(scores.items()):
            value = "C" if _h("score", sid, epoch, i) % 3 else "I"
            out[name] = {**score, "value": value, "explanation": f"{value} for {sid} epoch {epoch}"}
        return out

    def clone(self, out: Path, sid: str, epoch: int) -> None:
        """Write this log as the job (sid, epoch) of another worker would have."""
        c._fast_zstd()
        new_uuid = _uuid(sid, epoch)
        started = datetime(2026, 11, 29, tzinfo=UTC) + timedelta(seconds=_h("t", sid, epoch) % 86_400_000 / 1000)
        ids = {k: _uuid(k, sid, epoch) for k in ("eval_id", "run_id", "task_id")}
        entries: dict[str, bytes] = {}
        for name, value in self.entries.items():
            if name == self.sample_name:
                sample = {**value, "id": sid, "epoch": epoch, "uuid": new_uuid}
                sample["scores"] = self._scores(value.get("scores") or {}, sid, epoch)
                name = f"samples/{sid}_epoch_{epoch}.json"
                entries[name] = _dumps(sample).replace(self.uuid.encode(), new_uuid.encode())
            elif name == "summaries.json" or name.startswith("_journal/summaries/"):
                rows = [
                    {
                        **row,
                        "id": sid,
                        "epoch": epoch,
                        "uuid": new_uuid,
                        "scores": self._scores(row.get("scores") or {}, sid, epoch),
                        "started_at": started.isoformat(),
                        "completed_at": (started + timedelta(seconds=1.5)).isoformat(),
                    }
                    for row in value
                ]
                entries[name] = _dumps(rows)
            elif name == "reductions.json":
                entries[name] = _dumps(
                    [{**r, "samples": [{**s, "sample_id": sid} for s in r.get("samples", [])]} for r in value]
                )
            elif name in ("header.json", "_journal/start.json"):
                ev = value["eval"]
                head = {
                    **value,
                    "eval": {
                        **ev,
                        **ids,
                        "created": started.isoformat(),
                        "dataset": {**ev["dataset"], "sample_ids": [sid]},
                        "config": {**ev["config"], "sample_id": [sid]},
                    },
                }
                if "stats" in value:
                    head["stats"] = {
                        **value["stats"],
                        "started_at": started.isoformat(),
                        "completed_at": (started + timedelta(seconds=2)).isoformat(),
                    }
                entries[name] = _dumps(head)
            else:
                entries[name] = _dumps(value)
        tmp = out.with_name(out.name + ".tmp")
        with open(tmp, "wb") as fh, evalzip.open_writer(fh) as zf:
            for name, data in entries.items():
                evalzip.write_member(zf, name, data)
        tmp.replace(out)


def worker_job_log(sample_id: str = c.SMOKE_IDS[-1]) -> Path:
    """A one-sample toyarena log as a worker writes it (epochs=1, sample_id=[id]), cached."""
    cache = c._cache_dir() / "job.evaljob"
    if cache.exists():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import sys; sys.path[:0] = ['lib', 'examples/settings']\n"
            "from inspect_ai import eval\n"
            f"logs = eval({c.TASK_SPEC!r}, task_args={{'policy': 'honest', 'sandbox': 'local'}},"
            f" model='mockllm/model', sample_id=[{sample_id!r}], epochs=1, log_dir={tmp!r},"
            " log_format='eval', display='none')\n"
            "assert logs[0].status == 'success', logs[0].status\n"
            "print(logs[0].location)\n"
        )
        out = subprocess.run([c.PYTHON, "-c", code], cwd=c.REPO, check=True, capture_output=True, text=True)
        made = Path(out.stdout.strip().splitlines()[-1])
        partial = cache.with_name(".job.evaljob.tmp")
        partial.write_bytes(made.read_bytes())
        partial.replace(cache)
    return cache
