"""Every inspect_ai name ct-fleet uses that is not public API, in one place.

Pinned to inspect_ai 0.3.285 (requirements.lock), which has no public form of these
(where it has one, e.g. EvalError, EvalSampleReductions or SampleScore, callers import the
public name). What each group is for:

- the task loader and `slice_dataset`: a task built, and samples selected, exactly as
  `inspect eval SPEC -T ... --limit/--sample-id` does (worker jobs, the controller probe);
  `refers_to_task_source`: whether SPEC names a `@task_source`, as Inspect tells (the probe);
  `task_files` and `parse_decorators`: the task files `inspect eval DIR` or `GLOB` finds
  (planning/tasks.py);
- `PrerequisiteError`: what get_model raises when a provider's SDK is missing (preflight);
- Inspect's zip support: importing it registers zstd (method 93, multi-frame) with the
  stdlib zipfile; `.eval` entries are written with its settings and frame cap (evallog);
- results, reducers, metrics, headline metric, scorer names, the deserializing context and
  `to_json_safe`: a merged log's results computed and written as `inspect eval` does (merge);
- Inspect's `eval` command and the parsers it turns its options into `eval()` arguments
  with: `ct-fleet eval` takes every option of the installed Inspect, parsed as Inspect
  parses it (ct_fleet.inspect_options);
- where Inspect keeps the sample buffers of a log directory: what a job killed mid-sample
  leaves there is cleared by the warm runner (worker/forkserver.py);
- the order Inspect ships a checkpoint's files in (its commit markers last): the embedded
  cloud's copy of the checkpoints on disk is taken and put back in it
  (controller/fleet/checkpoint_mirror.py); where Inspect stages a log's checkpoints bound for
  S3 (restic repositories and their password), which it never deletes: the job does
  (worker/checkpoints.py); the earlier attempts' time a resumed sample's checkpoint
  restored, which the log does not hold (worker/job_hook.py).

An upgrade that moves a name breaks here: tests/dropin/test_inspect_private.py resolves each
import below and names the one that moved, tests/results/test_merge.py's parity tests check the
merge still computes what Inspect computes, and tests/repo/test_layout.py keeps every other
module off Inspect's private modules.

Importing this module imports inspect_ai itself (seconds): the CLI and the worker's job
path import it inside the functions that need it, never at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai._cli.eval import RunConfigInput, merge_run_config_params, parse_comma_separated, parse_run_config
from inspect_ai._cli.eval import eval_command as inspect_eval_command
from inspect_ai._cli.util import parse_cli_config, parse_model_role_cli_args, parse_sandbox
from inspect_ai._eval.list import task_files as inspect_task_files
from inspect_ai._eval.loader import load_tasks, refers_to_task_source, solver_from_spec
from inspect_ai._eval.score import metrics_from_log_header, reducers_from_log_header, resolve_scorers_info
from inspect_ai._eval.task.results import (
    ScorerInfo,
    _filter_metrics_by_scores,
    _reduced_views,
    _unique_scorer_names,
    compute_eval_scores,
    eval_results,
    reduce_scores,
)
from inspect_ai._eval.task.task import resolve_approval, resolve_review
from inspect_ai._eval.task.util import slice_dataset, task_file, task_run_dir
from inspect_ai._sentinel._config import resolve_sentinel_spec, sentinel_with_args
from inspect_ai._util.config import parse_cli_args, resolve_args
from inspect_ai._util.constants import get_deserializing_context
from inspect_ai._util.decorator import parse_decorators
from inspect_ai._util.error import PrerequisiteError
from inspect_ai._util.file import filesystem
from inspect_ai._util.generate_config_args import config_from_locals
from inspect_ai._util.json import to_json_safe
from inspect_ai._util.registry import registry_info, registry_params
from inspect_ai._util.working import sample_timing as _sample_timing
from inspect_ai._util.zipfile import _MultiFrameZstdCompressObj, zipfile_compress_kwargs
from inspect_ai.approval._policy import ApprovalPolicyConfig
from inspect_ai.log._headline import headline_metric_ref, resolve_headline_metric
from inspect_ai.log._recorders.buffer.database import location_dir_and_file, resolve_db_dir
from inspect_ai.model._model_info import _get_model_info_direct
from inspect_ai.review._policy import ReviewPolicyConfig
from inspect_ai.scorer._reducer import create_reducers
from inspect_ai.scorer._scorer import unique_scorer_name
from inspect_ai.solver._solver import SolverSpec
from inspect_ai.util._checkpoint._host_egress import _safe_order
from inspect_ai.util._checkpoint._layout.sample_checkpoints_dir import checkpoint_file_id
from inspect_ai.util._checkpoint._layout.staging_dir import _eval_staging_dir
from inspect_ai.util._checkpoint.parse_cli import _CheckpointConfigModel, parse_checkpoint
from inspect_ai.util._restic.resolver import cache_path as _restic_cache_path
from inspect_ai.util._sandbox.docker.config import find_compose_file

__all__ = [
    "ApprovalPolicyConfig",
    "ReviewPolicyConfig",
    "RunConfigInput",
    "model_info_direct",
    "SolverSpec",
    "resolve_approval",
    "resolve_review",
    "resolve_sentinel_spec",
    "solver_from_spec",
    "sentinel_with_args",
    "checkpoint_config",
    "checkpoint_ship_order",
    "checkpoint_staging_dir",
    "is_checkpoint_marker",
    "config_from_locals",
    "create_reducers",
    "inspect_eval_command",
    "inspect_task_files",
    "merge_run_config_params",
    "parse_checkpoint",
    "parse_cli_args",
    "parse_cli_config",
    "parse_comma_separated",
    "parse_decorators",
    "parse_model_role_cli_args",
    "parse_run_config",
    "parse_sandbox",
    "registry_info",
    "registry_params",
    "resolve_args",
    "task_file",
    "MultiFrameZstdCompressObj",
    "PrerequisiteError",
    "ScorerInfo",
    "compute_eval_scores",
    "deserializing_context",
    "eval_results",
    "find_compose_file",
    "headline_metric_ref",
    "load_tasks",
    "refers_to_task_source",
    "metrics_by_scores",
    "metrics_from_log_header",
    "reduce_scores",
    "reduced_views",
    "reducers_from_log_header",
    "resolve_headline_metric",
    "restic_cache_path",
    "resolve_scorers_info",
    "sample_buffer_dir",
    "sample_prior_time",
    "slice_dataset",
    "task_run_dir",
    "to_json_safe",
    "unique_scorer_name",
    "unique_scorer_names",
    "zipfile_compress_kwargs",
]

MultiFrameZstdCompressObj = _MultiFrameZstdCompressObj


def sample_buffer_dir(log_dir: Path) -> Path:
    """The directory of Inspect's sample buffer databases for the logs in `log_dir` (one per
    log directory, named by a hash of its URI, under Inspect's data dir)."""
    location = filesystem(str(log_dir)).path_as_uri(str(log_dir / "log.eval"))
    return resolve_db_dir() / location_dir_and_file(location)[0]


def sample_prior_time() -> tuple[float, float] | None:
    """In a sample: the wall and working seconds of its earlier attempts that the checkpoint
    it resumed from restored; None when it did not resume (or there is no sample)."""
    timing = _sample_timing()
    if timing is None or timing.prior_wall <= 0:
        return None
    return timing.prior_wall, timing.prior_working


def checkpoint_config(data: dict[str, Any]) -> Any:
    """A CheckpointConfig from a checkpoint config file's content, as --checkpoint FILE reads it."""
    return _CheckpointConfigModel.model_validate(data).to_dataclass()


def checkpoint_ship_order(files: list[str]) -> list[str]:
    """Checkpoint files in the order Inspect ships them to a remote location, each tier after
    what it refers to: restic's config and keys, data, indexes, snapshots, the rest, then
    the commit markers (ckpt-NNNNN.json). Paths are taken by their names' parts, so they may
    sit below a sample's directory."""
    ordered: list[str] = _safe_order(files)
    return ordered


def checkpoint_staging_dir(log_location: str) -> Path:
    """The host-local directory Inspect stages the checkpoints of the eval logged at
    `log_location` in, when they go to a remote location (under Inspect's cache)."""
    return Path(_eval_staging_dir(log_location))


def is_checkpoint_marker(name: str) -> bool:
    """A checkpoint's commit marker (ckpt-NNNNN.json), by its file name."""
    return checkpoint_file_id(name) is not None


def restic_cache_path() -> Path:
    """Where Inspect looks for its restic before it downloads one (this host's platform)."""
    from inspect_ai.util._restic.resolver import _current_platform

    return Path(_restic_cache_path(_current_platform()))


def deserializing_context() -> dict[str, Any]:
    """The pydantic context Inspect validates a log's models with when it reads one."""
    return get_deserializing_context()


def metrics_by_scores(metrics: Any, modes: set[str]) -> Any:
    """The metrics (list or dict form) that read scores in one of `modes`, else None."""
    return _filter_metrics_by_scores(metrics, modes)  # type: ignore[arg-type]


def reduced_views(reducers: Any, name_implicit_mean: bool) -> list[tuple[Any, str | None]]:
    """(reducer, display name) per reduced view, as eval_results makes them."""
    return _reduced_views(reducers, name_implicit_mean)


def unique_scorer_names(infos: list[Any]) -> list[str]:
    return _unique_scorer_names(infos)


def model_info_direct(model: str) -> Any:
    """What Inspect's model database knows of MODEL, found without building its client (as
    eval's check of --cost-limit looks it up)."""
    return _get_model_info_direct(model)
