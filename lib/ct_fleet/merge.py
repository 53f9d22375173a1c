"""Merge many one-sample Inspect `.eval` logs into one log per task, streaming.

Each fleet worker runs one sample x one epoch as its own Inspect eval (epochs=1,
sample_id=[id]) and uploads a one-sample `.eval`. `relabel_epoch` turns such a log into
epoch k of the run; `merge_eval_logs` groups logs by task identity and writes one `.eval`
per group that reads like a direct run of the whole task:

- pass 1 reads only each file's `header.json` and `summaries.json` (a few KB), checks
  which task it belongs to and keeps one record per (str(sample id), epoch): no error
  beats an error, then the newest `completed_at` wins;
  each record's summary and entry location, and each input's stats, are parked in a
  temporary spool file so memory holds only small per-sample records;
- pass 2 copies each kept sample entry's *compressed* bytes into the output zip
  (`evalzip.copy_raw_member`), never inflating or parsing a sample;
- results are computed from the summaries' scores with Inspect's own reducers and
  metrics, then `summaries.json`, `reductions.json` and, last, `header.json` are written
  to a temporary name that is renamed into place.

The header follows the researched .eval facts for inspect_ai 0.3.285 (pinned in
setup.cfg; see shared/reference/inspect-eval-facts.md): stable
eval_id/run_id/task_id derived from the task identity and the intended selection,
`dataset.sample_ids` = intended ids in dataset order with their original types,
`config.epochs` = intended epochs, `config.sample_id` = None when the whole dataset was
selected, `config.limit` = None, `invalidated` = OR of the contributing inputs, stats
merged, status "error" when samples are missing ("N of M samples missing") or sample
errors exceed the run's fail_on_error, else "success".

Private Inspect modules used (keep the parity test in tests/test_merge.py when upgrading):
`inspect_ai._eval.task.results.eval_results`, `inspect_ai._eval.score.{metrics_from_log_header,
reducers_from_log_header, resolve_scorers_info}`, `inspect_ai._util.json.to_json_safe`,
`inspect_ai._util.zipfile` (zstd support for zipfile).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from ct_fleet import evalzip
from ct_fleet.evalzip import RawMember

logger = logging.getLogger(__name__)

MERGE_FORMAT_VERSION = 1
"""Bump when the way ids or identities are derived changes (re-merges then get new ids)."""

HEADER_JSON = "header.json"
SUMMARIES_JSON = "summaries.json"
REDUCTIONS_JSON = "reductions.json"
START_JSON = "_journal/start.json"
JOURNAL_SUMMARIES = "_journal/summaries/"
SAMPLES_DIR = "samples/"
_SAMPLE_NAME = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")

# generate-config fields that are transport/runtime options, not task identity (the
# same list Inspect's eval_set uses to match tasks with logs)
_RUNTIME_GENERATE_FIELDS = frozenset(
    {
        "max_retries",
        "timeout",
        "attempt_timeout",
        "stream_idle_timeout",
        "max_connections",
        "adaptive_connections",
        "batch",
        "cache",
        "cache_prompt",
    }
)
# eval config fields that change what a sample does or how it is scored
_IDENTITY_CONFIG_FIELDS = (
    "epochs_reducer",
    "message_limit",
    "token_limit",
    "token_limit_type",
    "turn_limit",
    "time_limit",
    "working_limit",
    "cost_limit",
    "score_on_error",
    "approval",
)
_LISTED = 20  # how many missing/failed samples an error message names


@dataclass
class MergedTask:
    """The outcome of merging one task's logs."""

    path: Path
    task: str
    status: str  # "success" or "error"
    samples_expected: int  # len(sample_ids) x epochs
    samples_present: int
    missing: list[tuple[str | int, int]] = field(default_factory=list)
    errors: list[tuple[str | int, int, str]] = field(default_factory=list)
    duplicates_dropped: int = 0
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    score_rates: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- relabel


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
        infos = evalzip.live_infos(zf)
        renames: dict[str, str] = {}
        for name in infos:
            m = _SAMPLE_NAME.match(name)
            if not m:
                continue
            old = int(m.group("epoch"))
            if old == epoch:
                continue
            if old != 1:
                raise ValueError(
                    f"{path}: {name} is epoch {old}; only epoch 1 can be relabelled"
                )
            renames[name] = f"{SAMPLES_DIR}{m.group('id')}_epoch_{epoch}.json"
        if not renames:
            return
        clash = set(renames.values()) & (set(infos) - set(renames))
        if clash:
            raise ValueError(f"{path}: already holds {sorted(clash)}")

        tmp = path.with_name(f".{path.name}.relabel-{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as out_file, evalzip.open_writer(out_file) as out:
                for name, info in infos.items():
                    if name in renames:
                        data = _patch_sample_epoch(zf.read(info), 1, epoch, f"{path}:{name}")
                        evalzip.write_member(out, renames[name], data)
                    elif name == SUMMARIES_JSON or (
                        name.startswith(JOURNAL_SUMMARIES) and name.endswith(".json")
                    ):
                        rows = json.loads(zf.read(info))
                        for row in rows:
                            if row.get("epoch") == 1:
                                row["epoch"] = epoch
                        evalzip.write_member(out, name, _dumps(rows))
                    else:
                        evalzip.copy_raw_member(out, src, RawMember.from_info(info))
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
    return _dumps(sample)


# --------------------------------------------------------------------------- pass 1


class _Spool:
    """An append-only temporary file: pass 1 parks each sample's summary and zip entry
    location (and each input's stats) here, keeping only an offset in memory."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="ct-fleet-merge-")
        self._end = 0

    def put(self, value: Any) -> tuple[int, int]:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(data)
        offset = self._end
        self._end += len(data)
        return offset, len(data)

    def get(self, offset: int, length: int) -> Any:
        self._file.seek(offset)
        return pickle.loads(self._file.read(length))

    def close(self) -> None:
        self._file.close()


@dataclass(slots=True)
class _Record:
    """One sample of one input: enough to choose it; its summary and entry are spooled."""

    file: int  # index into _Group.files
    sample_id: str | int
    epoch: int
    error: str | None
    completed_at: datetime
    spool: _Spool
    offset: int
    length: int

    def _load(self) -> tuple[bytes, RawMember]:
        return self.spool.get(self.offset, self.length)

    @property
    def summary(self) -> bytes:
        """Compact JSON of the sample summary."""
        return self._load()[0]

    @property
    def member(self) -> RawMember:
        return self._load()[1]


@dataclass(slots=True)
class _FileStats:
    started_at: str
    completed_at: str
    model_usage: dict[str, Any]
    role_usage: dict[str, Any]
    connection_limit_history: list[Any]


@dataclass(slots=True)
class _FileInfo:
    path: str
    invalidated: bool
    spool: _Spool
    offset: int
    length: int

    def stats(self) -> _FileStats:
        return self.spool.get(self.offset, self.length)


@dataclass
class _Group:
    key: str
    header: dict[str, Any]  # template: the first input's header (inputs sorted by path)
    spool: _Spool = field(default_factory=_Spool)
    files: list[_FileInfo] = field(default_factory=list)
    records: dict[tuple[str, int], _Record] = field(default_factory=dict)
    duplicates_dropped: int = 0
    created: str = ""  # earliest eval.created over all inputs


def _scan(path: Path) -> tuple[dict[str, Any], list[tuple[dict[str, Any], RawMember]]] | None:
    """Read one input's header and summaries; None (with a warning) if it is unusable."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = evalzip.live_infos(zf)
            if HEADER_JSON not in infos:
                logger.warning("skipping %s: no header.json (eval unfinished or crashed)", path)
                return None
            header = json.loads(zf.read(infos[HEADER_JSON]))
            if SUMMARIES_JSON in infos:
                rows = json.loads(zf.read(infos[SUMMARIES_JSON]))
            else:
                journal = sorted(
                    (n for n in infos if n.startswith(JOURNAL_SUMMARIES) and n.endswith(".json")),
                    key=lambda n: int(n[len(JOURNAL_SUMMARIES) : -len(".json")]),
                )
                rows = [row for n in journal for row in json.loads(zf.read(infos[n]))]
            latest: dict[tuple[str, int], dict[str, Any]] = {}
            for row in rows:  # last row per (id, epoch) wins, as in Inspect's readers
                latest[(str(row["id"]), int(row["epoch"]))] = row
            samples = []
            for row in latest.values():
                name = f"{SAMPLES_DIR}{row['id']}_epoch_{row['epoch']}.json"
                info = infos.get(name)
                if info is None:
                    logger.warning("%s: summary for %s but no sample entry; ignored", path, name)
                    continue
                samples.append((row, RawMember.from_info(info)))
            return header, samples
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError, EOFError) as ex:
        logger.warning("skipping %s: unreadable .eval (%s: %s)", path, type(ex).__name__, ex)
        return None


def _better(new: _Record, old: _Record) -> bool:
    """No error beats an error; then the newest completed_at; ties keep the first seen."""
    return (new.error is None, new.completed_at) > (old.error is None, old.completed_at)


def _group_inputs(inputs: Iterable[Path]) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for path in sorted({Path(p) for p in inputs}, key=str):
        scanned = _scan(path)
        if scanned is None:
            continue
        header, samples = scanned
        key = identity_key(header)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(key=key, header=header)
        stats = header.get("stats") or {}
        created = header["eval"].get("created", "")
        if created and (not group.created or _timestamp(created) < _timestamp(group.created)):
            group.created = created
        offset, length = group.spool.put(
            _FileStats(
                started_at=stats.get("started_at") or "",
                completed_at=stats.get("completed_at") or "",
                model_usage=stats.get("model_usage") or {},
                role_usage=stats.get("role_usage") or {},
                connection_limit_history=stats.get("connection_limit_history") or [],
            )
        )
        group.files.append(
            _FileInfo(
                path=str(path),
                invalidated=bool(header.get("invalidated")),
                spool=group.spool,
                offset=offset,
                length=length,
            )
        )
        file_index = len(group.files) - 1
        for row, member in samples:
            offset, length = group.spool.put((_dumps(row), member))
            record = _Record(
                file=file_index,
                sample_id=row["id"],
                epoch=int(row["epoch"]),
                error=_error_text(row.get("error")),
                completed_at=_timestamp(row.get("completed_at")),
                spool=group.spool,
                offset=offset,
                length=length,
            )
            rkey = (str(record.sample_id), record.epoch)
            current = group.records.get(rkey)
            if current is None:
                group.records[rkey] = record
            else:
                group.duplicates_dropped += 1
                if _better(record, current):
                    group.records[rkey] = record
    return list(groups.values())


# --------------------------------------------------------------------------- identity


def identity(header: dict[str, Any]) -> dict[str, Any]:
    """The fields of a log header that make two logs the same task (see module doc).

    Leaves out what differs per worker: eval/run/task ids, creation time, the selected
    sample ids and epochs, the task file's directory, sandbox config paths, runtime
    and transport options, tags and metadata.
    """
    ev = header.get("eval") or {}
    plan = header.get("plan") or {}
    config = ev.get("config") or {}
    dataset = ev.get("dataset") or {}
    task_file = ev.get("task_file")
    roles = ev.get("model_roles") or {}

    def role(cfg: dict[str, Any]) -> dict[str, Any]:
        cfg = {k: v for k, v in cfg.items() if k != "base_url"}
        if isinstance(cfg.get("config"), dict):
            cfg["config"] = _without(cfg["config"], _RUNTIME_GENERATE_FIELDS)
        return cfg

    return {
        "task": ev.get("task"),
        "task_version": ev.get("task_version", 0),
        "task_file": task_file.replace("\\", "/").rsplit("/", 1)[-1] if task_file else None,
        "task_registry_name": ev.get("task_registry_name"),
        "task_args": ev.get("task_args") or {},
        "solver": ev.get("solver"),
        "solver_args": ev.get("solver_args"),
        "model": ev.get("model"),
        "model_args": ev.get("model_args") or {},
        "model_generate_config": _without(
            ev.get("model_generate_config") or {}, _RUNTIME_GENERATE_FIELDS
        ),
        "model_roles": {
            name: [role(c) for c in cfg] if isinstance(cfg, list) else role(cfg)
            for name, cfg in roles.items()
        },
        "dataset": {k: dataset.get(k) for k in ("name", "location", "samples", "shuffled")},
        "scorers": ev.get("scorers"),
        "metrics": ev.get("metrics"),
        "config": {k: config.get(k) for k in _IDENTITY_CONFIG_FIELDS},
        "plan": {
            "name": plan.get("name"),
            "steps": [_without(s, {"params"}) for s in plan.get("steps") or []],
            "config": _without(plan.get("config") or {}, _RUNTIME_GENERATE_FIELDS),
        },
    }


def identity_key(header: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(identity(header))).hexdigest()


# --------------------------------------------------------------------------- merge


def merge_eval_logs(
    inputs: Iterable[Path],
    out_dir: Path,
    *,
    sample_ids: Sequence[str | int] | None = None,
    epochs: int | None = None,
    name: str | None = None,
) -> list[MergedTask]:
    """Merge one-sample `.eval` logs into one `.eval` per task identity in `out_dir`.

    `sample_ids` are the intended ids in dataset order (None: the ids seen in the
    inputs); `epochs` the intended epochs (None: the largest seen); `name` the output
    file stem (default: the task name; a `-<hash>` suffix is added when several
    tasks would share a stem).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = _group_inputs(inputs)
    stems = _stems(groups, name)
    run_id = _short_id("run", *sorted(g.key for g in groups))
    results = []
    try:
        for group in groups:
            results.append(
                _merge_group(
                    group,
                    out_dir / f"{stems[group.key]}.eval",
                    run_id=run_id,
                    sample_ids=sample_ids,
                    epochs=epochs,
                )
            )
            group.spool.close()
    finally:
        for group in groups:
            group.spool.close()
    return results


def merge_dir(src: Path, out_dir: Path, **kw: Any) -> list[MergedTask]:
    """Merge every `*.eval` under `src` (recursively), leaving out anything under `out_dir`."""
    src, out_dir = Path(src), Path(out_dir)
    out_resolved = out_dir.resolve()

    def outside_out(p: Path) -> bool:
        try:
            p.resolve().relative_to(out_resolved)
        except ValueError:
            return True
        return False

    inputs = [p for p in src.rglob("*.eval") if p.is_file() and outside_out(p)]
    return merge_eval_logs(inputs, out_dir, **kw)


def _stems(groups: list[_Group], name: str | None) -> dict[str, str]:
    base = {g.key: _safe_stem(name or str(g.header["eval"].get("task") or "task")) for g in groups}
    counts: dict[str, int] = {}
    for stem in base.values():
        counts[stem] = counts.get(stem, 0) + 1
    return {k: (s if counts[s] == 1 else f"{s}-{k[:8]}") for k, s in base.items()}


def _merge_group(
    group: _Group,
    out_path: Path,
    *,
    run_id: str,
    sample_ids: Sequence[str | int] | None,
    epochs: int | None,
) -> MergedTask:
    ids, n_epochs = _selection(group, sample_ids, epochs)

    # kept records in output order (epoch-major, dataset order, as Inspect runs them)
    kept: list[_Record] = []
    missing: list[tuple[str | int, int]] = []
    for epoch in range(1, n_epochs + 1):
        for sid in ids:
            record = group.records.get((str(sid), epoch))
            if record is None:
                missing.append((sid, epoch))
            else:
                kept.append(record)
    if len(group.records) > len(kept):
        logger.warning(
            "%s: %d sample(s) outside the intended %d ids x %d epochs left out",
            group.header["eval"].get("task"),
            len(group.records) - len(kept),
            len(ids),
            n_epochs,
        )
    errors = [(r.sample_id, r.epoch, r.error or "") for r in kept if r.error is not None]

    header = _header(group, out_path, run_id, ids, n_epochs, kept)
    total = len(ids) * n_epochs
    results, reductions = _compute_results(header, kept, total, len(kept) - len(errors))
    header.results = results
    _set_status(header, total, missing, errors)
    _write(out_path, header, reductions, group, kept)

    return MergedTask(
        path=out_path,
        task=header.eval.task,
        status=header.status,
        samples_expected=total,
        samples_present=len(kept),
        missing=missing,
        errors=errors,
        duplicates_dropped=group.duplicates_dropped,
        metrics=_metrics_table(results),
        score_rates=_score_rates(kept),
    )


def _selection(
    group: _Group, sample_ids: Sequence[str | int] | None, epochs: int | None
) -> tuple[list[str | int], int]:
    """Intended ids (original types where seen, dataset order) and epochs."""
    seen: dict[str, str | int] = {}
    for record in group.records.values():
        seen.setdefault(str(record.sample_id), record.sample_id)
    if sample_ids is None:
        ids = sorted(seen.values(), key=_id_sort_key)
    else:
        ids, taken = [], set()
        for sid in sample_ids:
            if str(sid) not in taken:
                taken.add(str(sid))
                ids.append(seen.get(str(sid), sid))
    n_epochs = epochs if epochs is not None else max((k[1] for k in group.records), default=1)
    if n_epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {n_epochs}")
    return ids, n_epochs


def _header(
    group: _Group,
    out_path: Path,
    run_id: str,
    ids: list[str | int],
    n_epochs: int,
    kept: list[_Record],
) -> Any:
    """The template header with the merged selection, stable ids and merged stats."""
    from inspect_ai.log import EvalLog, EvalStats

    ev = group.header["eval"]
    contributing = sorted({r.file for r in kept})
    files = [group.files[i] for i in contributing] or group.files
    id_parts = (group.key, out_path.stem, _canonical([str(i) for i in ids]).decode(), str(n_epochs))

    eval_spec = dict(ev)
    eval_spec.pop("eval_set_id", None)
    eval_spec.pop("shards", None)
    eval_spec["eval_id"] = _short_id("eval", *id_parts)
    eval_spec["run_id"] = run_id
    eval_spec["task_id"] = _short_id("task", *id_parts)
    if group.created:
        eval_spec["created"] = group.created
    dataset = dict(ev.get("dataset") or {})
    dataset["sample_ids"] = ids
    eval_spec["dataset"] = dataset
    config = dict(ev.get("config") or {})
    config["epochs"] = n_epochs
    config["limit"] = None
    # a leftover single id would make eval_retry silently shrink the run
    whole = dataset.get("samples") is not None and len(ids) >= int(dataset["samples"])
    config["sample_id"] = None if whole else list(ids)
    eval_spec["config"] = config

    header = EvalLog.model_validate(
        {
            "version": group.header.get("version", 2),
            "status": "started",
            "eval": eval_spec,
            "plan": group.header.get("plan") or {},
            "invalidated": any(f.invalidated for f in files),
        },
        context=_deserializing_context(),
    )
    header.stats = EvalStats.model_validate(_merge_stats(files), context=_deserializing_context())
    return header


def _set_status(
    header: Any,
    total: int,
    missing: list[tuple[str | int, int]],
    errors: list[tuple[str | int, int, str]],
) -> None:
    from inspect_ai._util.error import EvalError

    problems = []
    if missing:
        problems.append(f"{len(missing)} of {total} samples missing: {_list_keys(missing)}")
    if errors and _should_fail(len(errors), total, header.eval.config.fail_on_error):
        listed = "; ".join(f"({sid!r}, {ep}): {msg}" for sid, ep, msg in errors[:_LISTED])
        more = f"; ... {len(errors) - _LISTED} more" if len(errors) > _LISTED else ""
        problems.append(f"{len(errors)} of {total} samples failed: {listed}{more}")
    header.status = "error" if problems else "success"
    header.error = (
        EvalError(message="; ".join(problems), traceback="", traceback_ansi="")
        if problems
        else None
    )


def _write(
    out_path: Path, header: Any, reductions: Any, group: _Group, kept: list[_Record]
) -> None:
    """start.json, the samples' compressed bytes, summaries, reductions, header.json last;
    into a temporary file renamed into place."""
    from inspect_ai._util.json import to_json_safe

    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out_file, evalzip.open_writer(out_file) as out:
            start = {"version": header.version, "eval": header.eval, "plan": header.plan}
            evalzip.write_member(out, START_JSON, to_json_safe(start, indent=None))
            _copy_samples(out, group, kept)
            evalzip.write_member_chunks(out, SUMMARIES_JSON, _json_array(r.summary for r in kept))
            if reductions is not None:
                evalzip.write_member(out, REDUCTIONS_JSON, to_json_safe(reductions, indent=None))
            evalzip.write_member(out, HEADER_JSON, to_json_safe(header, indent=None))
            out.close()
            out_file.flush()
            os.fsync(out_file.fileno())
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)


def _copy_samples(out: zipfile.ZipFile, group: _Group, kept: list[_Record]) -> None:
    src: BinaryIO | None = None
    src_index = -1
    try:
        for record in kept:
            if record.file != src_index:
                if src is not None:
                    src.close()
                src = open(group.files[record.file].path, "rb")
                src_index = record.file
            evalzip.copy_raw_member(out, src, record.member)
    finally:
        if src is not None:
            src.close()


# --------------------------------------------------------------------------- results


def _compute_results(
    header: Any, kept: list[_Record], total: int, completed: int
) -> tuple[Any, Any]:
    """Results and reductions from the kept summaries' scores, as Inspect computes them.

    Mirrors `inspect_ai.log.recompute_metrics` without needing the samples: scores are
    grouped by sample id, reduced with the run's epochs_reducer and fed to the scorers'
    metrics (errored samples have no scores and so are left out).
    """
    from inspect_ai._eval.score import (
        metrics_from_log_header,
        reducers_from_log_header,
        resolve_scorers_info,
    )
    from inspect_ai._eval.task.results import eval_results
    from inspect_ai.log import EvalResults
    from inspect_ai.scorer import Score
    from inspect_ai.scorer._metric import SampleScore

    # eval_results needs every score at once. Samples whose id, metadata and scores are
    # equal (typically the same sample over many epochs) share one read-only score dict,
    # and equal strings and numbers share one object (pydantic keeps them as is), so
    # memory grows with the distinct scores rather than with every sample. Inspect's
    # reducers and metrics only read scores; the parity test pins this.
    shared: dict[tuple[type, Any], Any] = {}
    seen: dict[bytes, dict[str, SampleScore]] = {}
    scores: list[dict[str, SampleScore]] = []
    for record in kept:
        summary = json.loads(record.summary)
        if not summary.get("scores"):
            continue
        key = hashlib.blake2b(
            _dumps([summary["id"], summary.get("metadata"), summary["scores"]]), digest_size=16
        ).digest()
        sample_scores = seen.get(key)
        if sample_scores is None:
            sample_id = _share(summary["id"], shared)
            metadata = _share(summary.get("metadata"), shared)
            sample_scores = seen[key] = {
                name: SampleScore(
                    score=Score.model_validate(
                        _share(value, shared), context=_deserializing_context()
                    ),
                    sample_id=sample_id,
                    sample_metadata=metadata,
                )
                for name, value in _share(summary["scores"], shared).items()
            }
        scores.append(sample_scores)
    del seen, shared
    empty = EvalResults(total_samples=total, completed_samples=completed)
    if not scores:
        return empty, None
    try:
        results, reductions = eval_results(
            samples=total,
            scores=scores,
            reducers=reducers_from_log_header(header),
            scorers=resolve_scorers_info(header),
            metrics=metrics_from_log_header(header),
            completed_samples=completed,
            headline_metric=header.eval.headline_metric,
        )
    except Exception as ex:  # a metric we cannot load must not lose the merged samples
        logger.warning(
            "%s: could not compute metrics (%s: %s); merged log has no scores",
            header.eval.task, type(ex).__name__, ex,
        )
        return empty, None
    return results, reductions


def _share(value: Any, shared: dict[tuple[type, Any], Any]) -> Any:
    """`value` with its str/int/float leaves (and dict keys) replaced by equal shared ones."""
    if isinstance(value, dict):
        return {_share(k, shared): _share(v, shared) for k, v in value.items()}
    if isinstance(value, list):
        return [_share(v, shared) for v in value]
    kind = type(value)
    if kind is str or kind is int or kind is float:
        return shared.setdefault((kind, value), value)
    return value


def _metrics_table(results: Any) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for score in results.scores if results is not None else []:
        key = score.name
        if key in table:
            key = f"{score.name}/{score.reducer or 'unreduced'}"
        table[key] = {
            name: float(metric.value)
            for name, metric in score.metrics.items()
            if isinstance(metric.value, (int, float))
        }
    return table


def _score_rates(kept: list[_Record]) -> dict[str, float]:
    ok = 0
    correct: dict[str, int] = {}
    for record in kept:
        if record.error is not None:
            continue
        ok += 1
        for name, score in (json.loads(record.summary).get("scores") or {}).items():
            hit = isinstance(score, dict) and score.get("value") == "C"
            correct[name] = correct.get(name, 0) + int(hit)
    return {name: n / ok for name, n in correct.items()} if ok else {}


def _should_fail(errors: int, total: int, fail_on_error: bool | float | None) -> bool:
    """Inspect's rule (`_eval/task/error.py`) for when sample errors fail the eval."""
    if fail_on_error is False:
        return False
    if fail_on_error is None or fail_on_error is True:
        return errors > 0
    if fail_on_error < 1:
        return errors >= fail_on_error * total
    return errors >= fail_on_error


def _merge_stats(files: list[_FileInfo]) -> dict[str, Any]:
    """Running totals over the files' spooled stats (one file's stats in memory at a time)."""
    from inspect_ai.model import ModelUsage

    usage_sums: dict[str, dict[str, ModelUsage]] = {"model_usage": {}, "role_usage": {}}
    started: str | None = None
    finished: str | None = None
    history: list[Any] = []
    for f in files:
        stats = f.stats()
        for which, sums in usage_sums.items():
            for model, usage in getattr(stats, which).items():
                u = ModelUsage.model_validate(usage)
                sums[model] = sums[model] + u if model in sums else u
        # min/max keep the first of equal timestamps, as min()/max() over the list did
        if stats.started_at and (
            started is None or _timestamp(stats.started_at) < _timestamp(started)
        ):
            started = stats.started_at
        if stats.completed_at and (
            finished is None or _timestamp(stats.completed_at) > _timestamp(finished)
        ):
            finished = stats.completed_at
        history.extend(stats.connection_limit_history)
    history.sort(key=lambda h: h.get("timestamp", 0) if isinstance(h, dict) else 0)
    return {
        "started_at": started or "",
        "completed_at": finished or "",
        "model_usage": {
            k: v.model_dump(exclude_none=True) for k, v in usage_sums["model_usage"].items()
        },
        "role_usage": {
            k: v.model_dump(exclude_none=True) for k, v in usage_sums["role_usage"].items()
        },
        "connection_limit_history": history,
    }


# --------------------------------------------------------------------------- helpers


def _deserializing_context() -> dict[str, Any]:
    from inspect_ai._util.constants import get_deserializing_context

    return get_deserializing_context()


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def _json_array(items: Iterable[bytes]) -> Iterator[bytes]:
    yield b"["
    for i, item in enumerate(items):
        yield item if i == 0 else b"," + item
    yield b"]"


def _without(d: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    drop = set(keys)
    return {k: v for k, v in d.items() if k not in drop}


_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # shortuuid's


def _short_id(*parts: str) -> str:
    """A 22-character shortuuid-style id that is a pure function of `parts`."""
    digest = hashlib.sha256(
        "\0".join((f"ct-fleet-merge/{MERGE_FORMAT_VERSION}", *parts)).encode()
    ).digest()
    n = int.from_bytes(digest[:16], "big")
    chars = []
    for _ in range(22):
        n, r = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[r])
    return "".join(chars)


def _timestamp(value: Any) -> datetime:
    if not value:
        return datetime.min.replace(tzinfo=timezone.utc)
    text = str(value)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def _error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _id_sort_key(sid: str | int) -> tuple[int, int | str]:
    return (0, sid) if isinstance(sid, int) else (1, str(sid))


def _list_keys(keys: list[tuple[str | int, int]]) -> str:
    listed = ", ".join(f"({sid!r}, {ep})" for sid, ep in keys[:_LISTED])
    return listed + (f", ... {len(keys) - _LISTED} more" if len(keys) > _LISTED else "")


def _safe_stem(text: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "task"
    return stem[:120]
