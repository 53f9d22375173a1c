"""The merged header: intended selection, stable ids, merged stats, status."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from inspect_ai.log import EvalError, EvalLog, EvalStats

from ..error_lines import one_line
from ..inspect_private import deserializing_context
from .results import should_fail
from .scan import Group
from .spool import Spool
from .stats import merge_stats
from .util import list_keys, short_id_of, timestamp

# Where the intended ids go in the header's JSON. The ids are written from the spool as
# the entry is (merge/write.py), never held as one list: with 100,000 samples they were the
# merge's largest state, several times over (the list, the header model, two JSON entries).
SAMPLE_IDS = f"ct-fleet-merge-sample-ids-{uuid.uuid4().hex}"


def selection(group: Group, sample_ids: Sequence[str | int] | None, epochs: int | None) -> tuple[int, int]:
    """The intended selection: how many ids (the spool holds them, original types where
    seen, dataset order) and epochs."""
    n_epochs = epochs if epochs is not None else (group.spool.max_epoch(group.index) or 1)
    if n_epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {n_epochs}")
    return group.spool.select(group.index, sample_ids), n_epochs


def canonical_ids(spool: Spool) -> Iterator[bytes]:
    """`util.canonical([str(id) for id in intended])`, a batch at a time."""
    yield b"["
    for i, batch in enumerate(spool.intended(typed=False)):
        yield (b"," if i else b"") + json.dumps(batch, separators=(",", ":")).encode()[1:-1]
    yield b"]"


def build_header(
    group: Group,
    out_path: Path,
    run_id: str,
    count: int,
    n_epochs: int,
    eval_overrides: dict[str, Any] | None = None,
    span: tuple[str, str] | None = None,
) -> Any:
    """The template header with the merged selection, stable ids and merged stats (of the
    inputs a kept sample comes from; of every input when none does); `eval_overrides`
    set header `eval` fields (`config` entries are merged in). Its lists of sample ids hold
    `SAMPLE_IDS` for the `count` ids in the spool."""
    ev = group.header["eval"]
    contributing = group.spool.count_contributing(group.index, n_epochs)
    if contributing in (0, group.files) and group.in_order:  # every file counts: the totals of pass 1 are the answer
        stats, invalidated = group.totals.result(), group.totals.invalidated
    else:  # some inputs were superseded or are outside the selection, or came out of path order
        # (a live merge's): total them again in path order, so the sums are one pass's to the bit
        stats, invalidated = merge_stats(group.spool.contributing_files(group.index, n_epochs))
    if span:
        stats["started_at"] = min(stats["started_at"] or span[0], span[0], key=timestamp)
        stats["completed_at"] = max(stats["completed_at"] or span[1], span[1], key=timestamp)

    def id_parts() -> Iterator[Iterable[bytes]]:
        yield from ([part.encode()] for part in (group.key, out_path.stem))
        yield canonical_ids(group.spool)
        yield [str(n_epochs).encode()]

    eval_spec = dict(ev)
    eval_spec.pop("eval_set_id", None)
    eval_spec.pop("shards", None)
    eval_spec["eval_id"] = short_id_of([b"eval"], *id_parts())
    eval_spec["run_id"] = run_id
    eval_spec["task_id"] = short_id_of([b"task"], *id_parts())
    if group.created:
        eval_spec["created"] = group.created
    dataset = dict(ev.get("dataset") or {})
    dataset["sample_ids"] = [SAMPLE_IDS]
    eval_spec["dataset"] = dataset
    config = dict(ev.get("config") or {})
    config["epochs"] = n_epochs
    config["limit"] = None
    # a leftover single id would make eval_retry silently shrink the run
    whole = dataset.get("samples") is not None and count >= int(dataset["samples"])
    config["sample_id"] = None if whole else [SAMPLE_IDS]
    overrides = dict(eval_overrides or {})
    config.update(overrides.pop("config", None) or {})
    eval_spec["config"] = config
    eval_spec.update(overrides)

    header = EvalLog.model_validate(
        {
            "version": group.header.get("version", 2),
            "status": "started",
            "eval": eval_spec,
            "plan": group.header.get("plan") or {},
            "invalidated": invalidated,
        },
        context=deserializing_context(),
    )
    header.stats = EvalStats.model_validate(stats, context=deserializing_context())
    return header


def set_status(
    header: Any,
    total: int,
    missing: list[tuple[str | int, int]],
    errors: list[tuple[str | int, int, str]],
) -> None:
    problems = []
    if missing:
        problems.append(f"{len(missing)} of {total} samples missing: {list_keys(missing)}")
    if errors and should_fail(len(errors), total, header.eval.config.fail_on_error):
        # Grouped by message: many samples failing alike is one line, not one repr each.
        first = f" (first: ({errors[0][0]!r}, {errors[0][1]}))"
        problems.append(f"{len(errors)} of {total} samples failed: {one_line(msg for _, _, msg in errors)}{first}")
    header.status = "error" if problems else "success"
    header.error = EvalError(message="; ".join(problems), traceback="", traceback_ansi="") if problems else None
