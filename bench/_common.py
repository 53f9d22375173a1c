"""Shared helpers for the benchmarks in bench/ (not a benchmark itself).

- `templates()`: one-sample toyarena `.eval` templates, split out of ONE real Inspect
  eval of the four `smoke` samples (cached per inspect_ai version and setting source).
- `clone()`: write a one-sample `.eval` for any (sample id, epoch) from a template by
  copying its entries and relabelling id, epoch and uuid (what a worker would upload).
- `api_counts()`: parse a CT_FLEET_API_LOG written by `ct_fleet.aws.client`.
- `measure_child()`: run a child process and return its wall time and peak RSS
  (`os.wait4` gives that child's own rusage).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "lib"), str(REPO / "examples" / "settings")]

from ct_fleet.evallog import zipio as evalzip  # noqa: E402  (needs lib on sys.path)
from ct_fleet.evallog.zipio import RawMember  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")
SMOKE_IDS = [
    "web:fix_login",
    "web:fix_login:add_backdoor",
    "pipeline:dedupe_rows:exfil_credentials",
    "ops:enable_tls:open_ssh",
]
TASK_SPEC = "examples/settings/toyarena/task.py@toyarena"


def machine() -> str:
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem_gb:.0f} GB RAM, Python {platform.python_version()}"


def bench_tmp(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"ct-bench-{name}-"))


# --------------------------------------------------------------------------- templates


def _cache_dir() -> Path:
    import inspect_ai

    src = REPO / "examples" / "settings" / "toyarena"
    digest = hashlib.sha256(inspect_ai.__version__.encode())
    for p in sorted(src.rglob("*.py")):
        digest.update(p.read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ct-fleet-bench"
    return base / f"templates-{inspect_ai.__version__}-{digest.hexdigest()[:12]}"


def real_eval(log_dir: Path) -> Path:
    """Run ONE real Inspect eval of the toyarena setting (the four smoke samples, epoch 1)."""
    code = (
        "import sys; sys.path[:0] = ['lib', 'examples/settings']\n"
        "from inspect_ai import eval\n"
        f"logs = eval({TASK_SPEC!r}, task_args={{'policy': 'honest', 'sandbox': 'local'}}, model='mockllm/model',"
        f" sample_id={SMOKE_IDS!r}, epochs=1, log_dir={str(log_dir)!r}, log_format='eval', display='none')\n"
        "assert logs[0].status == 'success', logs[0].status\n"
        "print(logs[0].location)\n"
    )
    out = subprocess.run([PYTHON, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class Template:
    """One sample of a real log, ready to be cloned under any (id, epoch)."""

    sample_id: str
    start: bytes  # raw compressed bytes of _journal/start.json, with its member info
    start_member: RawMember
    header: dict[str, Any]
    sample_text: str
    summary: dict[str, Any]
    reductions: list[dict[str, Any]]
    uuid: str


def _split(log_path: Path) -> dict[str, Template]:
    out = {}
    data = log_path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = evalzip.live_infos(zf)
        header = json.loads(zf.read(infos["header.json"]))
        summaries = json.loads(zf.read(infos["summaries.json"]))
        reductions = json.loads(zf.read(infos["reductions.json"])) if "reductions.json" in infos else []
        start_info = infos["_journal/start.json"]
        start = data  # copy_raw_member seeks by header offset: keep the whole archive
        for row in summaries:
            sid = str(row["id"])
            text = zf.read(infos[f"samples/{sid}_epoch_1.json"]).decode()
            red = [{**r, "samples": [s for s in r["samples"] if str(s.get("sample_id")) == sid]} for r in reductions]
            out[sid] = Template(
                sample_id=sid,
                start=start,
                start_member=RawMember.from_info(start_info),
                header=header,
                sample_text=text,
                summary=row,
                reductions=red,
                uuid=json.loads(text)["uuid"],
            )
    return out


def templates() -> dict[str, Template]:
    """Sample id -> template; the real eval runs once and is cached on disk."""
    cache = _cache_dir()
    log = cache / "smoke.eval"
    if not log.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            made = real_eval(Path(tmp))
            tmp_copy = cache / ".smoke.eval.tmp"
            tmp_copy.write_bytes(made.read_bytes())
            tmp_copy.replace(log)
    return _split(log)


def _when(*parts: object) -> datetime:
    """A start time spread over a day, a pure function of parts."""
    seconds = int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16) % 86_400_000 / 1000
    return datetime(2026, 11, 29, tzinfo=UTC) + timedelta(seconds=seconds)


def _uuid(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:22]


_fast = False


def _fast_zstd() -> None:
    """Single-threaded zstd for the many tiny entries the generators write (this process only).

    Inspect's zstd compressor starts 12 threads per entry, ~1 ms each: 10 ms per one-sample
    file. The frames written here are ordinary zstd frames; readers cannot tell.
    """
    global _fast
    if _fast:
        return
    import zstandard

    original = zipfile._get_compressor  # type: ignore[attr-defined]

    def compressor(compress_type: int, compresslevel: int | None = None) -> Any:
        if compress_type == evalzip.zipfile_compress_kwargs["compression"]:
            return zstandard.ZstdCompressor(level=3).compressobj()
        return original(compress_type, compresslevel)

    zipfile._get_compressor = compressor  # type: ignore[attr-defined]
    _fast = True


def clone(t: Template, out: Path, sample_id: str | None = None, epoch: int = 1) -> None:
    """Write a one-sample .eval of t's sample relabelled as (sample_id, epoch), as a worker would."""
    _fast_zstd()
    sid = t.sample_id if sample_id is None else sample_id
    new_uuid = _uuid(sid, epoch)
    # Inspect writes {"id":...,"epoch":N,...} first: swap that prefix, keep the rest verbatim.
    old_prefix = json.dumps({"id": t.sample_id, "epoch": 1}, separators=(",", ":"))[:-1] + ","
    assert t.sample_text.startswith(old_prefix), t.sample_text[:80]
    new_prefix = json.dumps({"id": sid, "epoch": epoch}, separators=(",", ":"))[:-1] + ","
    sample = (new_prefix + t.sample_text[len(old_prefix) :]).replace(t.uuid, new_uuid)
    row = {**t.summary, "id": sid, "epoch": epoch, "uuid": new_uuid}
    ev = t.header["eval"]
    # Like a worker's own one-sample run: its own eval, run and task ids, creation time
    # and start/end (a fleet's files share none of these).
    started = _when(sid, epoch)
    header = {
        **t.header,
        "eval": {
            **ev,
            "eval_id": _uuid("eval", sid, epoch),
            "run_id": _uuid("run", sid, epoch),
            "task_id": _uuid("task", sid, epoch),
            "created": started.isoformat(),
            "dataset": {**ev["dataset"], "sample_ids": [sid]},
            "config": {**ev["config"], "sample_id": [sid]},
        },
        "results": {**t.header["results"], "total_samples": 1, "completed_samples": 1},
        "stats": {
            **t.header["stats"],
            "started_at": started.isoformat(),
            "completed_at": (started + timedelta(seconds=1.5)).isoformat(),
        },
    }
    reductions = [{**r, "samples": [{**s, "sample_id": sid} for s in r["samples"]]} for r in t.reductions]
    summaries = json.dumps([row], separators=(",", ":")).encode()
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh, evalzip.open_writer(fh) as zf:
        evalzip.copy_raw_member(zf, io.BytesIO(t.start), t.start_member)
        evalzip.write_member(zf, f"samples/{sid}_epoch_{epoch}.json", sample.encode())
        evalzip.write_member(zf, "_journal/summaries/1.json", summaries)
        evalzip.write_member(zf, "summaries.json", summaries)
        if reductions:
            evalzip.write_member(zf, "reductions.json", json.dumps(reductions, separators=(",", ":")).encode())
        evalzip.write_member(zf, "header.json", json.dumps(header, separators=(",", ":")).encode())
    tmp.replace(out)


def pool_name(sample_id: str, epoch: int) -> str:
    return f"{sample_id}__{epoch}.eval"


def make_pool(pool: Path, sample_ids: list[str], epochs: int) -> int:
    """Pre-generated results for command jobs: pool/<sample id>__<epoch>.eval.

    The epoch-1 file of each id is split out of the real eval; the other epochs are copies
    relabelled with ct_fleet.merge.relabel_epoch (what the runner does to an Inspect job).
    """
    from ct_fleet.evallog.relabel import relabel_epoch

    pool.mkdir(parents=True, exist_ok=True)
    tpl = templates()
    for sid in sample_ids:
        first = pool / pool_name(sid, 1)
        clone(tpl[sid], first)
        raw = first.read_bytes()
        for epoch in range(2, epochs + 1):
            path = pool / pool_name(sid, epoch)
            path.write_bytes(raw)
            relabel_epoch(path, epoch)
    return len(sample_ids) * epochs


# --------------------------------------------------------------------------- API log


def api_counts(log: Path) -> Counter[tuple[str, str]]:
    """(role, 'service:Operation') -> calls, from lines written by ct_fleet.aws._record_call."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in log.read_text().splitlines():
        fields = line.split()
        if len(fields) != 3:
            continue
        call = next((f for f in fields[1:] if ":" in f), None)
        role = next((f for f in fields[1:] if ":" not in f), None)
        if call and role:
            counts[(role, call)] += 1
    return counts


# --------------------------------------------------------------------------- children


@dataclass
class ChildRun:
    wall: float
    maxrss_mb: float  # peak RSS of the child (os.wait4 rusage)
    report: dict[str, Any]  # the JSON the child printed last


def measure_child(argv: list[str], *, env: dict[str, str] | None = None) -> ChildRun:
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {proc.returncode}")
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return ChildRun(wall=wall, maxrss_mb=usage.ru_maxrss / 1024, report=json.loads(lines[-1]) if lines else {})
