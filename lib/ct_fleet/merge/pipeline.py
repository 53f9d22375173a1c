"""The merge from inputs to outputs: group by task, select, compute results, write."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol.run_layout import JOB_LOG_SUFFIX
from .header import build_header, selection, set_status
from .results import compute_results, metrics_table
from .scan import Check, Group, group_inputs
from .spool import Spool
from .util import safe_stem, short_id
from .write import write_log

logger = logging.getLogger("ct_fleet.merge")

# A fleet's per-job logs: one-sample .eval files under a suffix that `inspect view` and
# eval_set do not list as runs (they would read them as runs of the same task).
INPUT_SUFFIXES = (".eval", JOB_LOG_SUFFIX)


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
    why: str = ""  # the merged header's error message when status is "error"
    model_usage: dict[str, dict[str, Any]] = field(default_factory=dict)  # model -> ModelUsage fields
    source: str = ""  # the caller's name for what it merged (a fleet's task key), not a file name


class Merger:
    """A merge whose spool outlives one write: `add` the inputs as they come (only the new
    ones are read), `write` the merged logs whenever they are wanted, `close` at the end.

    What it writes is what a merge of every input so far from scratch writes, byte for byte:
    an input that changed or went since it was read makes it start again from scratch.
    One thread at a time may use it.
    """

    def __init__(self) -> None:
        self._spool: Spool | None = None
        self._groups: dict[str, Group] = {}

    def add(self, inputs: Iterable[Path], check: Check | None = None) -> None:
        """Read the inputs it has not read yet (pass 1); `inputs` is every input so far. An
        input `check` has a reason against is left out with it (a fleet's result that is not
        its job's)."""
        fresh = None
        if self._spool is not None:
            inputs = list(inputs)  # read twice when the spool starts again
            fresh = self._spool.new_inputs(inputs)
        if self._spool is None or fresh is None:
            self.close()
            self._spool = Spool()
            fresh = self._spool.new_inputs(inputs)
            assert fresh is not None  # an empty spool has read nothing that could change
        try:
            group_inputs(fresh, self._spool, self._groups, check)
        except BaseException:
            self.close()  # the spool holds part of what it was given: the next add starts again
            raise

    def write(
        self,
        out_dir: Path,
        *,
        sample_ids: Sequence[str | int] | None = None,
        epochs: int | None = None,
        name: str | None = None,
        eval_overrides: dict[str, Any] | None = None,
        span: tuple[str, str] | None = None,
        on_skip: Callable[[Path, str], None] | None = None,
        live: bool = False,
    ) -> list[MergedTask]:
        """One `.eval` per task identity in `out_dir`, of every input added so far (see
        `merge_eval_logs` for the arguments); on_skip hears of every input left out so far."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        if self._spool is None:
            return []
        if on_skip:
            for path, why in self._spool.skipped():
                on_skip(path, why)
        groups = sorted(self._groups.values(), key=lambda g: g.template_path)
        stems = output_stems(groups, name)
        run_id = short_id("run", *sorted(g.key for g in groups))
        return [
            merge_group(
                group,
                out_dir / f"{stems[group.key]}.eval",
                run_id=run_id,
                sample_ids=sample_ids,
                epochs=epochs,
                eval_overrides=eval_overrides,
                span=span,
                live=live,
            )
            for group in groups
        ]

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
        self._spool, self._groups = None, {}

    def __enter__(self) -> Merger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_eval_logs(
    inputs: Iterable[Path],
    out_dir: Path,
    *,
    sample_ids: Sequence[str | int] | None = None,
    epochs: int | None = None,
    name: str | None = None,
    eval_overrides: dict[str, Any] | None = None,
    span: tuple[str, str] | None = None,
    on_skip: Callable[[Path, str], None] | None = None,
    live: bool = False,
) -> list[MergedTask]:
    """Merge one-sample `.eval` logs into one `.eval` per task identity in `out_dir`.

    `sample_ids` are the intended ids in dataset order (None: the ids seen in the
    inputs); `epochs` the intended epochs (None: the largest seen); `name` the output
    file stem (default: the task name; a `-<hash>` suffix is added when several
    tasks would share a stem); `eval_overrides` header `eval` fields to set (e.g. the
    shipped code's `revision`, the user's `task_file`; `config` entries are merged in);
    `span` (started_at, completed_at) the run's own, which the stats' span is widened to;
    `on_skip(path, why)` hears of each input that is not a readable log (it is left out,
    never a reason to fail the merge); `live` marks the logs "started": the results so
    far of a run that goes on, which Inspect shows as running.
    """
    with Merger() as merger:
        merger.add(inputs)
        return merger.write(
            out_dir,
            sample_ids=sample_ids,
            epochs=epochs,
            name=name,
            eval_overrides=eval_overrides,
            span=span,
            on_skip=on_skip,
            live=live,
        )


def merge_dir(src: Path, out_dir: Path, **kw: Any) -> list[MergedTask]:
    """Merge every `*.eval` and `*.evaljob` under `src` (recursively), leaving out anything under `out_dir`."""
    src, out_dir = Path(src), Path(out_dir)
    out_resolved = out_dir.resolve()

    def outside_out(p: Path) -> bool:
        try:
            p.resolve().relative_to(out_resolved)
        except ValueError:
            return True
        return False

    inputs = (p for p in src.rglob("*") if p.suffix in INPUT_SUFFIXES and p.is_file() and outside_out(p))
    return merge_eval_logs(inputs, out_dir, **kw)


def output_stems(groups: list[Group], name: str | None) -> dict[str, str]:
    base = {g.key: safe_stem(name or str(g.header["eval"].get("task") or "task")) for g in groups}
    counts: dict[str, int] = {}
    for stem in base.values():
        counts[stem] = counts.get(stem, 0) + 1
    return {k: (s if counts[s] == 1 else f"{s}-{k[:8]}") for k, s in base.items()}


def merge_group(
    group: Group,
    out_path: Path,
    *,
    run_id: str,
    sample_ids: Sequence[str | int] | None,
    epochs: int | None,
    eval_overrides: dict[str, Any] | None = None,
    span: tuple[str, str] | None = None,
    live: bool = False,
) -> MergedTask:
    count, n_epochs = selection(group, sample_ids, epochs)
    spool = group.spool
    kept, failed = spool.count_kept(group.index, n_epochs)
    outside = spool.count_records(group.index) - kept
    if outside:
        logger.warning(
            "%s: %d sample(s) outside the intended %d ids x %d epochs left out",
            group.header["eval"].get("task"),
            outside,
            count,
            n_epochs,
        )
    missing = list(spool.missing(group.index, n_epochs))
    errors = list(spool.errors(group.index, n_epochs))
    assert len(errors) == failed

    header = build_header(group, out_path, run_id, count, n_epochs, eval_overrides, span)
    total = count * n_epochs
    computed = compute_results(header, group, n_epochs, total, kept - failed)
    header.results = computed.results
    set_status(header, total, missing, errors)
    if live:
        header.status, header.error = "started", None
    write_log(out_path, header, computed.reductions, group, n_epochs)

    return MergedTask(
        path=out_path,
        task=header.eval.task,
        status=header.status,
        samples_expected=total,
        samples_present=kept,
        missing=missing,
        errors=errors,
        duplicates_dropped=group.duplicates_dropped,
        metrics=metrics_table(computed.results),
        score_rates=computed.score_rates,
        why=header.error.message if header.error else "",
        model_usage={name: usage.model_dump(exclude_none=True) for name, usage in header.stats.model_usage.items()},
    )
