"""Each sample's reduced scores, parked in the spool's database until metrics and
reductions.json read them, one (score name, reducer view) at a time.

With many distinct sample ids the reduced scores are the merge's largest state: a
pydantic SampleScore with its Score, explanation and sample metadata is 1-2 KB, one per
sample, score name and reducer. Here they are pickled (exact: values keep their types)
into a table, and read back in eval_results' order when needed.

Inspect's metrics take a `list[SampleScore]` and Inspect's own `scorer_for_metrics`
holds all of them at once, so a metric's input cannot stream. For the built-in metrics
that read nothing but `score.value` (VALUE_ONLY, checked against inspect_ai 0.3.285's
source), the list holds one shared SampleScore per distinct value instead: the metric
computes the same floats in the same order from a list of references (8 bytes a sample).
Any other metric gets the full SampleScores.
"""

from __future__ import annotations

import math
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from inspect_ai.log import EvalSampleReductions, EvalSampleScore
from inspect_ai.scorer import SampleScore, Score
from inspect_ai.util import registry_info

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reduced (
    name TEXT NOT NULL,
    view INTEGER NOT NULL,
    k1 INTEGER NOT NULL,
    k2 INTEGER NOT NULL,
    score BLOB NOT NULL,
    PRIMARY KEY (name, view, k1, k2)
) WITHOUT ROWID;
"""
_BATCH = 512

# (registry name, inner function) of metrics whose code reads only `score.value` of each
# SampleScore (stderr only without `cluster`: its clustered form reads the metadata).
VALUE_ONLY = frozenset(
    {
        ("inspect_ai/accuracy", "accuracy.<locals>.metric"),
        ("inspect_ai/mean", "mean.<locals>.metric"),
        ("inspect_ai/stderr", "stderr.<locals>.metric"),
        ("inspect_ai/std", "std.<locals>.metric"),
        ("inspect_ai/var", "var.<locals>.metric"),
        ("inspect_ai/bootstrap_stderr", "bootstrap_stderr.<locals>.metric"),
    }
)


def value_only(metrics: Any) -> bool:
    """True when `metrics` is a plain list of metrics that read only each score's value."""
    if not isinstance(metrics, list):
        return False
    try:
        return all((registry_info(m).name, getattr(m, "__qualname__", "")) in VALUE_ONLY for m in metrics)
    except Exception:  # no registry info: not one of Inspect's own
        return False


@dataclass
class Reduction:
    """One entry of reductions.json: its head (no samples) and its samples, read lazily."""

    head: EvalSampleReductions
    samples: Callable[[], Iterator[EvalSampleScore]]


def _value_only(value: Any) -> SampleScore:
    # model_construct: the value as it is, never re-validated into another type
    return SampleScore.model_construct(score=Score.model_construct(value=value))


class ReducedScores:
    """The reduced-score table of a spool's database."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(_SCHEMA)
        self._rows: list[tuple[str, int, int, int, bytes]] = []

    def add(self, name: str, key: tuple[int, int], per_view: list[SampleScore]) -> None:
        for view, score in enumerate(per_view):
            self._rows.append((name, view, key[0], key[1], pickle.dumps(score, protocol=pickle.HIGHEST_PROTOCOL)))
        if len(self._rows) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self.db.executemany("INSERT INTO reduced (name, view, k1, k2, score) VALUES (?, ?, ?, ?, ?)", self._rows)
            self._rows = []

    def clear(self) -> None:
        self._rows = []
        self.db.execute("DELETE FROM reduced")

    def scores(self, name: str, view: int) -> Iterator[SampleScore]:
        """The reduced scores of one name and view, in eval_results' order."""
        self.flush()
        query = "SELECT score FROM reduced WHERE name = ? AND view = ? ORDER BY k1, k2"
        for (blob,) in self.db.execute(query, (name, view)):
            score: SampleScore = pickle.loads(blob)
            yield score

    def for_metrics(self, name: str, view: int, metrics: Any) -> list[SampleScore]:
        if not value_only(metrics):
            return list(self.scores(name, view))
        shared: dict[tuple[type, Any], SampleScore] = {}
        out: list[SampleScore] = []
        for full in self.scores(name, view):
            value = full.score.value
            kind = type(value)
            if kind in (str, int, float, bool) and not (kind is float and math.isnan(value)):  # type: ignore[arg-type]
                light = shared.get((kind, value))
                if light is None:
                    light = shared[(kind, value)] = _value_only(value)
            else:  # containers and NaN: one each, with the value alone
                light = _value_only(value)
            out.append(light)
        return out

    def reduction(self, scorer: str, reducer: str | None, view: int) -> Reduction:
        def samples() -> Iterator[EvalSampleScore]:
            for ss in self.scores(scorer, view):
                yield EvalSampleScore(**ss.score.__dict__, sample_id=ss.sample_id)

        return Reduction(EvalSampleReductions(scorer=scorer, reducer=reducer, samples=[]), samples)
