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
from inspect_ai._eval.task.results import eval_results
from inspect_ai._util.constants import get_deserializing_context
from inspect_ai._util.error import EvalError
from inspect_ai._util.json import to_json_safe
from inspect_ai.log import EvalLog, EvalResults, EvalStats
from inspect_ai.model import ModelUsage
from inspect_ai.scorer import Score
from inspect_ai.scorer._metric import SampleScore

__all__ = [
    "EvalError",
    "EvalLog",
    "EvalResults",
    "EvalStats",
    "ModelUsage",
    "SampleScore",
    "Score",
    "deserializing_context",
    "eval_results",
    "metrics_from_log_header",
    "reducers_from_log_header",
    "resolve_scorers_info",
    "to_json_safe",
]


def deserializing_context() -> dict[str, Any]:
    return get_deserializing_context()
