"""Inspect's `eval` options on a fleet: every one of them, read from the installed Inspect.

`ct-fleet eval` takes each option of `inspect eval` (`inspect_eval_params`). What it does
on a fleet is one of three things, named for each option in HANDLING:

- "job": it reaches every job's `eval()` call, parsed by Inspect's own parsers
  (`eval_kwargs`, which mirrors `inspect eval`'s own step from options to arguments), so
  each job's log records it as a direct run would and the merged log carries it;
- "fleet": it has a meaning for the whole fleet, said in `--help` (the tasks, models,
  selection and epochs plan the fleet; --log-dir is where the merged logs also go; ...);
- "refused": it configures one interactive process and means nothing on a fleet; using
  it is a one-line error naming what to use instead.

Options are carried to workers as the values click parsed (JSON), with any config file
the option names read here into its content: a worker has the user's files only if they
ship. tests/dropin/test_inspect_options.py fails when Inspect gains an option this table does
not name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import BadInput

if TYPE_CHECKING:
    import click

Kind = Literal["job", "fleet", "refused"]


@dataclass(frozen=True)
class Handling:
    kind: Kind
    note: str = ""  # fleet: what it means here; refused: why not, and what instead


JOB = Handling("job")


def _fleet(note: str) -> Handling:
    return Handling("fleet", note)


def _refused(note: str) -> Handling:
    return Handling("refused", note)


_GENERATE = (
    "generate_config max_retries timeout attempt_timeout stream_idle_timeout max_tokens system_message best_of "
    "frequency_penalty presence_penalty logit_bias seed stop_seqs temperature top_p top_k num_choices logprobs "
    "top_logprobs prompt_logprobs parallel_tool_calls internal_tools max_tool_output cache_prompt fallback_models "
    "fail_on_refusal verbosity effort reasoning_effort reasoning_mode reasoning_tokens reasoning_summary "
    "reasoning_history response_schema extra_headers extra_body cache modalities"
).split()

_JOB_OPTIONS = (
    "model_base_url model_role solver s solver_config tags metadata approval review sentinel sentinel_arg "
    "no_sandbox_cleanup sandbox_prebuilt epochs_reducer no_epochs_reducer max_subprocesses "
    "max_dataset_memory message_limit token_limit turn_limit cost_limit model_cost_config time_limit working_limit "
    "fail_on_error no_fail_on_error continue_on_fail retry_on_error score_on_error no_log_realtime log_images "
    "log_model_api log_refusals log_buffer log_shared no_score no_score_display log_level log_level_transcript "
    "debug_errors"
).split()

_SCAN = "scan results are written beside one job's log and lost with its worker: scan the merged logs afterwards"

HANDLING: dict[str, Handling] = {
    **{name: JOB for name in (*_GENERATE, *_JOB_OPTIONS)},
    "max_connections": Handling(
        "job",
        "at most N requests at once to each model across the whole fleet: N is divided among the live workers, "
        "each job runs one request at a time; concurrency_per_worker still caps a worker's jobs (docs/model-budget.md)",
    ),
    "adaptive_connections": Handling(
        "job",
        "each model's fleet-wide total adapts between MIN and MAX on rate-limit retries, divided as "
        "--max-connections is (which wins when both are given)",
    ),
    "checkpoint": Handling(
        "job",
        "each job checkpoints its sample into the fleet's S3 prefix; a job run again on any worker resumes "
        "from its last committed checkpoint (docs/checkpoints.md)",
    ),
    "batch": Handling("job", "each job batches its own requests: with one sample per job, few are batched"),
    "tasks": _fleet("every TASK x --model pair is one merged log of one fleet"),
    "model": _fleet("several (a,b or repeated) make a task x model grid"),
    "m": _fleet("model args of every model (as Inspect's -M)"),
    "model_config": _fleet("read here; its args reach every job, as -M"),
    "t": _fleet("task args (as Inspect's -T); part of the fleet id"),
    "task_config": _fleet("read here; its args are task args, as -T"),
    "run_config": _fleet("read here: its task, model and args plan the fleet, the rest reaches every job"),
    "limit": _fleet("selects the samples the fleet runs"),
    "sample_id": _fleet("selects the samples the fleet runs"),
    "epochs": _fleet("one job per sample x epoch"),
    "json_output": _fleet("the fleet's outcome as JSON on stdout (docs/json.md)"),
    "env": _fleet("NAME=value sets a variable for every job (sent as a secret); a bare ENV picks a setting's env"),
    "sandbox": _fleet("Inspect's TYPE[:CONFIG] for every job; module:type imports an external sandbox type"),
    "log_dir": _fleet("merged logs are also written here (they are always in runs/<fleet_id>/merged/)"),
    "log_format": _fleet("the format of the merged logs written to --log-dir (jobs always write .eval)"),
    "display": _fleet("the fleet draws its own progress; none draws nothing"),
    "no_ansi": _fleet("no colour or cursor movement in the fleet's output"),
    "max_samples": _fleet("samples at once per worker (caps --ec2-arg concurrency_per_worker)"),
    "max_sandboxes": _fleet("sandboxed samples at once per worker (caps --ec2-arg concurrency_per_worker)"),
    "sample_shuffle": _fleet("shuffles each task's samples before --limit selects them; a job runs its one sample"),
    "max_tasks": _fleet("every task x model shares one work queue: the fleet runs them all at once"),
    "model_spec": _refused("one model with its own generate config: give it with --model, -M and the generate options"),
    "detach": _refused("a fleet outlives its command already: Ctrl-C and answer 'leave', then rerun to resume"),
    "trace": _refused("traces one process's model calls to its terminal: read the transcripts in the merged logs"),
    "ctl_server": _refused("controls one process: watch the fleet with ct-fleet status FLEET"),
    "acp_server": _refused("serves one process to an ACP client: run the sample with inspect eval to attach"),
    "notification": _refused("human-in-the-loop needs a person at one process: run such samples with inspect eval"),
    "debug": _refused("attaches a debugger to one process: debug one job with ct-fleet run-job"),
    "traceback_locals": _refused(
        "shows locals in one process's tracebacks: rerun the job with ct-fleet run-job and INSPECT_TRACEBACK_LOCALS=1"
    ),
    "debug_port": _refused("attaches a debugger to one process: debug one job with ct-fleet run-job"),
    "no_log_samples": _refused("the merge is made of the jobs' samples: drop them from the merged log afterwards"),
    **{
        name: _refused(_SCAN)
        for name in (
            "scanner scanner_arg scans scan_name scan_tags scan_metadata scan_filter scan_model "
            "scan_model_base_url scan_model_arg scan_model_config scan_model_role scan_generate_config"
        ).split()
    },
}

# Fleet options that travel with the job options all the same: a run config's job part,
# and what the merged header records as a direct run's would (max_tasks).
RECORDED = ("run_config", "max_tasks", "sample_shuffle")

# Options whose value may name a config file: read here into its content (a dict), which
# Inspect's parsers take in place of the file on a worker, where the file is not.
_FILE_OPTIONS = (
    "run_config",
    "solver_config",
    "generate_config",
    "model_cost_config",
    "approval",
    "review",
    "cache",
    "batch",
)


def inspect_eval_params() -> list[click.Parameter]:
    """The parameters of the installed Inspect's `inspect eval` command."""
    from .inspect_private import inspect_eval_command

    return list(inspect_eval_command.params)


def unhandled(names: list[str]) -> list[str]:
    """Inspect's option names HANDLING says nothing about (an Inspect upgrade's new ones)."""
    return [name for name in names if name not in HANDLING]


def refusal(name: str, flag: str) -> str:
    return f"{flag}: {HANDLING[name].note}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def read_config_file(name: str, value: Any) -> Any:
    """A config file's content in place of its path (relative to this directory)."""
    from .inspect_private import resolve_args

    if not isinstance(value, str) or not Path(value).is_file():
        return value
    try:
        content = resolve_args(value)
    except Exception as exc:
        raise BadInput(f"--{name.replace('_', '-')} {value}: not a YAML or JSON config file ({exc})") from None
    if not isinstance(content, dict):
        raise BadInput(f"--{name.replace('_', '-')} {value}: expected a mapping in the file")
    return content


def job_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The options that reach every job, as JSON: set values only, config files read."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        carried = HANDLING.get(name, JOB).kind == "job" or name in RECORDED
        if not carried or value is None or value == ():
            continue
        if name in _FILE_OPTIONS:
            value = read_config_file(name, value)
        if name == "checkpoint" and isinstance(value, str) and Path(value).is_file():
            value = {"checkpoint_file": read_config_file(name, value)}
        out[name] = _jsonable(value)
    json.dumps(out)  # a value no job could be sent is a bug here, not a worker's surprise
    return out


def _model_roles(options: Mapping[str, Any]) -> Any:
    from .inspect_private import parse_model_role_cli_args

    roles = options.get("model_role")
    return parse_model_role_cli_args(tuple(roles)) if roles else None


def _checkpoint(value: Any) -> Any:
    from .inspect_private import checkpoint_config, parse_checkpoint

    if isinstance(value, dict):
        return checkpoint_config(value["checkpoint_file"])
    if value is True:
        return parse_checkpoint("default")
    return parse_checkpoint(str(value)) if value else None


def _policy_config(name: str, value: Any) -> Any:
    from .inspect_private import ApprovalPolicyConfig, ReviewPolicyConfig

    if not isinstance(value, dict):
        return value
    config = ApprovalPolicyConfig if name == "approval" else ReviewPolicyConfig
    return config.model_validate(value)


def _token_limit(value: Any) -> Any:
    from inspect_ai.util import TokenLimit

    return TokenLimit.model_validate(value) if isinstance(value, dict) else value


def eval_kwargs(options: Mapping[str, Any], *, epochs: int = 1) -> dict[str, Any]:
    """`eval()` keyword arguments for a job from its options, as `inspect eval` makes them
    (inspect_ai/_cli/eval.py, eval_exec): raises what Inspect's parsers raise."""
    from inspect_ai import Epochs

    from .inspect_private import (
        SolverSpec,
        config_from_locals,
        create_reducers,
        parse_cli_args,
        parse_cli_config,
        parse_comma_separated,
        parse_sandbox,
    )

    o = dict(options)
    kwargs: dict[str, Any] = dict(config_from_locals(dict(o)))
    if o.get("solver"):
        solver_args = parse_cli_config(o.get("s"), o.get("solver_config"))
        kwargs["solver"] = SolverSpec(o["solver"], solver_args, solver_args)
    elif o.get("s") or o.get("solver_config"):
        raise ValueError("-S and --solver-config need --solver")
    reducers: list[Any] | None = None
    if o.get("no_epochs_reducer"):
        reducers = []
    elif o.get("epochs_reducer"):
        reducers = create_reducers(parse_comma_separated(o["epochs_reducer"]))
    kwargs["epochs"] = Epochs(epochs, reducers) if reducers is not None else epochs
    fail_on_error = o.get("fail_on_error")
    if o.get("no_fail_on_error"):
        fail_on_error = False
    elif fail_on_error == 0.0:
        fail_on_error = True
    direct = (
        "model_base_url log_level tags approval review notification max_subprocesses max_dataset_memory message_limit "
        "turn_limit time_limit working_limit cost_limit model_cost_config continue_on_fail score_on_error "
        "log_model_api log_refusals log_buffer log_shared log_level_transcript debug_errors"
    ).split()
    for name in direct:
        if o.get(name) is not None:
            kwargs[name] = _policy_config(name, o[name]) if name in ("approval", "review") else o[name]
    if isinstance(kwargs.get("tags"), str):
        kwargs["tags"] = parse_comma_separated(kwargs["tags"])
    extra = {
        "model_roles": _model_roles(o),
        "metadata": parse_cli_args(tuple(o["metadata"])) if o.get("metadata") else None,
        "token_limit": _token_limit(o.get("token_limit")),
        "checkpoint": _checkpoint(o.get("checkpoint")),
        "fail_on_error": fail_on_error,
        "retry_on_error": o.get("retry_on_error") or None,
        "sandbox": parse_sandbox(o["sandbox"]) if o.get("sandbox") else None,
        "sandbox_cleanup": False if o.get("no_sandbox_cleanup") else None,
        "sandbox_prebuilt": True if o.get("sandbox_prebuilt") else None,
        "log_realtime": False if o.get("no_log_realtime") else None,
        "log_images": False if o.get("log_images") is False else None,
        "score": False if o.get("no_score") else None,
        "score_display": False if o.get("no_score_display") else None,
    }
    kwargs.update({k: v for k, v in extra.items() if v is not None})
    if o.get("run_config"):
        kwargs = _with_run_config(o["run_config"], kwargs, epochs)
    if o.get("sentinel"):
        from .inspect_private import sentinel_with_args

        kwargs["sentinel"] = sentinel_with_args(o["sentinel"], tuple(o.get("sentinel_arg") or ()))
    return kwargs


# What a --run-config says that plans the fleet (read by the planner, not by a job).
RUN_CONFIG_PLAN_KEYS = ("tasks", "task_args", "model", "model_args", "epochs")


def run_config_params(content: Mapping[str, Any], *, roles: bool = True) -> dict[str, Any]:
    """A --run-config's `eval()` parameters, as Inspect reads the file. Without `roles`, its
    model_roles are left out: Inspect builds each role's model client, which needs the
    provider's key, and the controller plans with keys only the workers are given."""
    from .inspect_private import parse_run_config

    given = dict(content) if roles else {k: v for k, v in content.items() if k != "model_roles"}
    return parse_run_config(given)  # type: ignore[arg-type]  # resolve_args takes a mapping too


def _with_run_config(content: Mapping[str, Any], kwargs: dict[str, Any], epochs: int) -> dict[str, Any]:
    """The job's arguments over a run config's, as `inspect eval --run-config` merges them."""
    from inspect_ai import Epochs

    from .inspect_private import merge_run_config_params

    params = run_config_params(content)
    reducer = getattr(params.get("epochs"), "reducer", None)
    for key in RUN_CONFIG_PLAN_KEYS:
        params.pop(key, None)
    merged = merge_run_config_params(params, kwargs)
    if isinstance(merged.get("epochs"), int) and reducer:
        merged["epochs"] = Epochs(epochs, reducer)
    return merged


def env_values(pairs: list[str]) -> dict[str, str]:
    """--env NAME=value pairs as `inspect eval` sets them: each value read as YAML, then
    made a string again (`on` becomes `True`, as it does for a direct run)."""
    from .inspect_private import parse_cli_args

    return {name: str(value) for name, value in parse_cli_args(pairs, preserve_quoted_commas=True).items()}


def shuffle_of(value: Any) -> bool | int | None:
    """--sample-shuffle's click value as eval() takes it: -1 (bare) shuffles at random, 0 not at all."""
    if value is None or value is False:
        return None
    if value is True:
        return True
    seed = int(value)
    return True if seed == -1 else (seed or None)
