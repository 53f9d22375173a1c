"""Results and reductions from the kept summaries' scores, as Inspect computes them."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from inspect_ai.log import EvalResults, EvalSampleReductions, EvalSampleScore
from inspect_ai.scorer import SampleScore, Score

from ..evallog.layout import dumps
from ..inspect_private import (
    ScorerInfo,
    compute_eval_scores,
    deserializing_context,
    eval_results,
    headline_metric_ref,
    metrics_by_scores,
    metrics_from_log_header,
    reduce_scores,
    reduced_views,
    reducers_from_log_header,
    resolve_headline_metric,
    resolve_scorers_info,
    unique_scorer_name,
    unique_scorer_names,
)
from .reduced import ReducedScores, Reduction
from .scan import Group

logger = logging.getLogger("ct_fleet.merge")


@dataclass
class Results:
    results: Any
    reductions: list[Reduction] | None
    score_rates: dict[str, float]


def compute_results(header: Any, group: Group, epochs: int, total: int, completed: int) -> Results:
    """Results and reductions from the kept summaries' scores, as Inspect computes them.

    Mirrors `inspect_ai.log.recompute_metrics` without the samples. Inspect groups the
    scores by sample id, reduces each sample's epochs with every epochs_reducer, then
    feeds the reduced scores to the scorers' metrics. Here the spool yields the records
    sample by sample, so each sample is reduced as soon as its epochs are read and only
    the reduced scores (one per sample, scorer and reducer) stay in memory; metrics and
    reductions then go through the same steps `eval_results` takes, in the same order.
    Metrics that want every epoch's score ("unreduced" metrics, or no reducer at all)
    get the whole list instead, as before (memory then grows with the samples).
    """
    empty = EvalResults(total_samples=total, completed_samples=completed)
    try:
        reducers = reducers_from_log_header(header)
        scorers = resolve_scorers_info(header)
        metrics = metrics_from_log_header(header)
        streamed = _stream(group, epochs, reducers)
        if not streamed.seen:
            return Results(empty, None, streamed.rates)
        scorers_info = _scorers_info(scorers, metrics, streamed.names)
        if reducers == [] or any(_has_unreduced_metrics(info.metrics) for info in scorers_info):
            results, reductions = _all_scores(header, group, epochs, total, completed, reducers, scorers, metrics)
        else:
            results, reductions = _from_reduced(streamed, scorers_info, reducers, total, completed, header)
        return Results(results, reductions, streamed.rates)
    except Exception as ex:  # a metric we cannot load must not lose the merged samples
        logger.warning(
            "%s: could not compute metrics (%s: %s); merged log has no scores",
            header.eval.task,
            type(ex).__name__,
            ex,
        )
        return Results(empty, None, {})


@dataclass
class _Streamed:
    reduced: ReducedScores  # per sample, score name and reducer view: its reduced score
    names: list[str] = field(default_factory=list)  # score names by first appearance in output order
    seen: bool = False  # any scores at all
    rates: dict[str, float] = field(default_factory=dict)


def _stream(group: Group, epochs: int, reducers: list[Any] | None) -> _Streamed:
    """One pass over the kept records, sample by sample: reduce each sample's epochs with
    every reducer view into the spool, and count the samples scored "C" per score name
    (score_rates). Each reduced score is keyed as eval_results orders its groups: where
    the sample's first score of that name appears in output order (epoch, then position)."""
    views = reduced_views(reducers, False) if reducers != [] else []
    out = _Streamed(ReducedScores(group.spool.db))
    out.reduced.clear()
    first_seen: dict[str, tuple[int, int, int]] = {}  # name -> (epoch, position, index in its dict)
    ok = 0
    correct: dict[str, int] = {}
    current: int | None = None
    per_name: dict[str, list[tuple[int, SampleScore]]] = {}

    def reduce_sample(pos: int) -> None:
        for name, scored in per_name.items():
            sample_scores = [ss for _, ss in scored]  # epochs in order, as eval_results sees them
            reduced = [reduce_scores(sample_scores, reducer=reducer)[0] for reducer, _ in views]
            out.reduced.add(name, (scored[0][0], pos), reduced)
        per_name.clear()

    for pos, _, epoch, error, summary_bytes in group.spool.kept_by_sample(group.index, epochs):
        if current is not None and current != pos:
            reduce_sample(current)
        current = pos
        summary = json.loads(summary_bytes)
        scores = summary.get("scores") or {}
        if error is None:
            ok += 1
            for name, score in scores.items():
                hit = isinstance(score, dict) and score.get("value") == "C"
                correct[name] = correct.get(name, 0) + int(hit)
        if not scores:
            continue
        out.seen = True
        for index, (name, value) in enumerate(scores.items()):
            key = (epoch, pos, index)
            if name not in first_seen or key < first_seen[name]:
                first_seen[name] = key
            sample_score = SampleScore(
                score=Score.model_validate(value, context=deserializing_context()),
                sample_id=summary["id"],
                sample_metadata=summary.get("metadata"),
            )
            per_name.setdefault(name, []).append((epoch, sample_score))
    if current is not None:
        reduce_sample(current)
    out.reduced.flush()
    out.names = sorted(first_seen, key=lambda name: first_seen[name])
    out.rates = {name: n / ok for name, n in correct.items()} if ok else {}
    return out


def _has_unreduced_metrics(metrics: Any) -> bool:
    return metrics_by_scores(metrics, {"unreduced"}) is not None


def _scorers_info(scorers: list[Any], metrics: Any, names: list[str]) -> list[Any]:
    """eval_results' scorer list: the header's scorers, then a ScorerInfo for each score
    name no scorer accounts for (in the order such names first appear)."""
    infos = list(scorers)
    resolved = set(unique_scorer_names(infos))
    for name in names:
        if name not in resolved:
            info = ScorerInfo.from_name(name)
            if metrics is not None:
                info.metrics = metrics
            infos.append(info)
            resolved.add(name)
    return infos


def _from_reduced(
    streamed: _Streamed, scorers_info: list[Any], reducers: list[Any] | None, total: int, completed: int, header: Any
) -> tuple[Any, Any]:
    """eval_results and compute_eval_scores_for_views (inspect_ai 0.3.285) over scores
    already reduced per sample; tests/results/test_merge.py checks both give the same results.
    The reductions come back as `Reduction`s whose samples the writer reads from the spool."""
    results = EvalResults(total_samples=total, completed_samples=completed)
    result_scores: list[Any] = []
    sample_reductions: list[Any] = []
    views = reduced_views(reducers, False)
    for scorer_info in scorers_info:
        scorer_name = unique_scorer_name(scorer_info.name, [s.name for s in result_scores])
        reduced_metrics = metrics_by_scores(scorer_info.metrics, {"auto", "reduced"})
        if reduced_metrics is None:
            continue
        for index, (_, display_name) in enumerate(views):
            # one (scorer, view) in memory at a time; reductions.json reads them again
            sample_reductions.append(streamed.reduced.reduction(scorer_name, display_name, index))
            reduced_scores = streamed.reduced.for_metrics(scorer_name, index, reduced_metrics)
            result_scores.extend(
                compute_eval_scores(reduced_scores, reduced_metrics, scorer_name, scorer_info, display_name)
            )
            del reduced_scores
    reductions = None
    if scorers_info:
        results.scores = result_scores
        reductions = sample_reductions
    headline = resolve_headline_metric(results, header.eval.headline_metric)
    if headline is not None:
        results.headline = headline_metric_ref(headline)
    return results, reductions


def _all_scores(
    header: Any,
    group: Group,
    epochs: int,
    total: int,
    completed: int,
    reducers: Any,
    scorers: Any,
    metrics: Any,
) -> tuple[Any, Any]:
    """eval_results itself, over every kept score (for metrics that want them all)."""
    # Samples whose id, metadata and scores are equal (typically the same sample over
    # many epochs) share one read-only score dict, and equal strings and numbers share
    # one object (pydantic keeps them as is), so memory grows with the distinct scores
    # rather than with every sample. Inspect's reducers and metrics only read scores.
    shared: dict[tuple[type, Any], Any] = {}
    seen: dict[bytes, dict[str, SampleScore]] = {}
    scores: list[dict[str, SampleScore]] = []
    for record in group.spool.kept(group.index, epochs):
        summary = json.loads(record.summary)
        if not summary.get("scores"):
            continue
        key = hashlib.blake2b(
            dumps([summary["id"], summary.get("metadata"), summary["scores"]]), digest_size=16
        ).digest()
        sample_scores = seen.get(key)
        if sample_scores is None:
            sample_id = share(summary["id"], shared)
            metadata = share(summary.get("metadata"), shared)
            sample_scores = seen[key] = {
                name: SampleScore(
                    score=Score.model_validate(share(value, shared), context=deserializing_context()),
                    sample_id=sample_id,
                    sample_metadata=metadata,
                )
                for name, value in share(summary["scores"], shared).items()
            }
        scores.append(sample_scores)
    del seen, shared
    results, reductions = eval_results(
        samples=total,
        scores=scores,
        reducers=reducers,
        scorers=scorers,
        metrics=metrics,
        completed_samples=completed,
        headline_metric=header.eval.headline_metric,
    )
    return results, None if reductions is None else [in_memory(r) for r in reductions]


def in_memory(reduction: EvalSampleReductions) -> Reduction:
    def samples() -> Iterator[EvalSampleScore]:
        return iter(reduction.samples)

    return Reduction(reduction.model_copy(update={"samples": []}), samples)


def share(value: Any, shared: dict[tuple[type, Any], Any]) -> Any:
    """`value` with its str/int/float leaves (and dict keys) replaced by equal shared ones."""
    if isinstance(value, dict):
        return {share(k, shared): share(v, shared) for k, v in value.items()}
    if isinstance(value, list):
        return [share(v, shared) for v in value]
    kind = type(value)
    if kind is str or kind is int or kind is float:
        return shared.setdefault((kind, value), value)
    return value


def metrics_table(results: Any) -> dict[str, dict[str, float]]:
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


def should_fail(errors: int, total: int, fail_on_error: bool | float | None) -> bool:
    """Inspect's rule (`_eval/task/error.py`) for when sample errors fail the eval."""
    if fail_on_error is False:
        return False
    if fail_on_error is None or fail_on_error is True:
        return errors > 0
    if fail_on_error < 1:
        return errors >= fail_on_error * total
    return errors >= fail_on_error
