"""Every inspect_ai name the merge uses that is not public API, in one place.

Pinned to inspect_ai 0.3.285 (requirements.lock). The parity test in tests/test_merge.py
compares a merged run with a direct `inspect eval` of the same samples: run it when
upgrading, and adapt only this module.
"""

from __future__ import annotations

from typing import Any

from inspect_ai._eval.score import (
    metrics_from_log_header,
    reducers_from_log_header,
    resolve_scorers_info,
)
from inspect_ai._eval.task.results import (
    ScorerInfo,
    _filter_metrics_by_scores,
    _reduced_views,
    _unique_scorer_names,
    compute_eval_scores,
    eval_results,
    reduce_scores,
)
from inspect_ai._util.constants import get_deserializing_context
from inspect_ai._util.error import EvalError
from inspect_ai._util.json import to_json_safe
from inspect_ai.log import EvalLog, EvalResults, EvalSampleScore, EvalStats
from inspect_ai.log._headline import headline_metric_ref, resolve_headline_metric
from inspect_ai.log._log import EvalSampleReductions
from inspect_ai.model import ModelUsage
from inspect_ai.scorer import Score
from inspect_ai.scorer._metric import SampleScore
from inspect_ai.scorer._scorer import unique_scorer_name

__all__ = [
    "EvalError",
    "EvalLog",
    "EvalResults",
    "EvalSampleReductions",
    "EvalSampleScore",
    "EvalStats",
    "ModelUsage",
    "SampleScore",
    "Score",
    "ScorerInfo",
    "compute_eval_scores",
    "deserializing_context",
    "eval_results",
    "has_unreduced_metrics",
    "headline_metric_ref",
    "metrics_by_scores",
    "metrics_from_log_header",
    "reduce_scores",
    "reduced_views",
    "reducers_from_log_header",
    "resolve_headline_metric",
    "resolve_scorers_info",
    "to_json_safe",
    "unique_scorer_name",
    "unique_scorer_names",
]


def deserializing_context() -> dict[str, Any]:
    return get_deserializing_context()


def metrics_by_scores(metrics: Any, modes: set[str]) -> Any:
    """The metrics (list or dict form) that read scores in one of `modes`, else None."""
    return _filter_metrics_by_scores(metrics, modes)  # type: ignore[arg-type]


def has_unreduced_metrics(metrics: Any) -> bool:
    return metrics_by_scores(metrics, {"unreduced"}) is not None


def reduced_views(reducers: Any, name_implicit_mean: bool) -> list[tuple[Any, str | None]]:
    """(reducer, display name) per reduced view, as eval_results makes them."""
    return _reduced_views(reducers, name_implicit_mean)


def unique_scorer_names(infos: list[Any]) -> list[str]:
    return _unique_scorer_names(infos)
