"""Merge many one-sample Inspect `.eval` logs into one log per task, streaming.

Each fleet worker runs one sample x one epoch as its own Inspect eval (epochs=1,
sample_id=[id]) and uploads a one-sample `.eval`. `relabel_epoch` turns such a log into
epoch k of the run; `merge_eval_logs` groups logs by task identity and writes one `.eval`
per group that reads like a direct run of the whole task:

- pass 1 reads each file once (`evallog.reader.EvalZip`: one read, one zstd decompressor
  per thread) and inflates only `header.json`, the summaries and the sample entries it
  keeps (each parsed once, so that a corrupt one is never copied); it checks which task
  the file belongs to and keeps one record per (str(sample id), epoch): no error beats an
  error, then the newest `completed_at` wins; each record's summary and entry location
  are parked in a temporary sqlite spool, and each input's stats are folded into its
  task's running totals, so memory holds per-task state only;
- a `Merger` keeps its spool between writes: a run's live merge adds only the logs that
  are new since its last write, and the end of run completes the merge from there;
- pass 2 copies each kept sample entry's *compressed* bytes into the output zip
  (`evalzip.copy_raw_member`), never inflating or parsing a sample;
- results are computed from the summaries' scores with Inspect's own reducers and
  metrics (each sample's reduced scores spooled too, merge/reduced.py), then `summaries.json`, `reductions.json` and, last, `header.json` are written
  to a temporary name that is renamed into place.

The header follows the researched .eval facts for inspect_ai 0.3.285 (pinned in
setup.cfg; see shared/reference/inspect-eval-facts.md): stable
eval_id/run_id/task_id derived from the task identity and the intended selection,
`dataset.sample_ids` = intended ids in dataset order with their original types,
`config.epochs` = intended epochs, `config.sample_id` = None when the whole dataset was
selected, `config.limit` = None, `invalidated` = OR of the contributing inputs, stats
merged, status "error" when samples are missing ("N of M samples missing") or sample
errors exceed the run's fail_on_error, else "success".

Inspect's results, reducers, metrics and JSON encoding are private API, reached through
ct_fleet/inspect_private.py (keep the parity tests in tests/results/test_merge.py when upgrading).
"""

from ..protocol.run_layout import JOB_LOG_SUFFIX
from .identity import identity, identity_key
from .pipeline import MergedTask, Merger, merge_dir, merge_eval_logs
from .util import short_id

__all__ = [
    "JOB_LOG_SUFFIX",
    "MergedTask",
    "Merger",
    "identity",
    "identity_key",
    "merge_dir",
    "merge_eval_logs",
    "short_id",
]
