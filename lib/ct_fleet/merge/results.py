"""Results and reductions from the kept summaries' scores, as Inspect computes them."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from ..evallog.layout import dumps
from .inspect_api import (
    EvalResults,
    SampleScore,
    Score,
    deserializing_context,
    eval_results,
    metrics_from_log_header,
    reducers_from_log_header,
    resolve_scorers_info,
)
from .scan import Record

logger = logging.getLogger("ct_fleet.merge")


def compute_results(header: Any, kept: list[Record], total: int, completed: int) -> tuple[Any, Any]:
    """Results and reductions from the kept summaries' scores, as Inspect computes them.

    Mirrors `inspect_ai.log.recompute_metrics` without needing the samples: scores are
    grouped by sample id, reduced with the run's epochs_reducer and fed to the scorers'
    metrics (errored samples have no scores and so are left out).
    """
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
            header.eval.task,
            type(ex).__name__,
            ex,
        )
        return empty, None
    return results, reductions


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


def score_rates(kept: list[Record]) -> dict[str, float]:
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


def should_fail(errors: int, total: int, fail_on_error: bool | float | None) -> bool:
    """Inspect's rule (`_eval/task/error.py`) for when sample errors fail the eval."""
    if fail_on_error is False:
        return False
    if fail_on_error is None or fail_on_error is True:
        return errors > 0
    if fail_on_error < 1:
        return errors >= fail_on_error * total
    return errors >= fail_on_error
