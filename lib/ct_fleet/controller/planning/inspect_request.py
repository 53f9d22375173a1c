"""The `inspect eval` side of a request: tasks, models, options, as Inspect reads them.

`ct-fleet eval` takes every option of `inspect eval` (ct_fleet.inspect_options). Here
they are sorted into what plans the fleet (tasks, models, task and model args, a run
config's own), what only the fleet uses (--log-dir, --max-samples, ...) and what reaches
every job (JobOptions), which is parsed now exactly as each job will parse it, so that
what Inspect would refuse is refused before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import inspect_options
from ...errors import BadInput
from . import eval_checks

# Without a model, a plain task runs as `inspect eval` runs it: with none/none (a task that
# calls generate then fails, as directly). A setting's policies default to the mock model.
PLAIN_DEFAULT_MODEL = "none/none"
SETTING_DEFAULT_MODEL = "mockllm/model"

# Job options that change how fast a job runs or what it prints, not its result: they
# stay out of the fleet id, so that a rerun with another --max-connections resumes.
NOT_IDENTITY = frozenset(
    {
        "max_connections",
        "adaptive_connections",
        "log_level",
        "log_level_transcript",
        "log_buffer",
        "log_shared",
        "no_log_realtime",
        "debug_errors",
        "no_score_display",
        "max_subprocesses",
        "max_dataset_memory",
    }
)


def split_list(value: str | Sequence[str] | None) -> list[str]:
    """a,b,c (or a list of such) -> [a, b, c]."""
    parts = [value] if isinstance(value, str) else list(value or [])
    return [p.strip() for part in parts for p in str(part).split(",") if p.strip()]


@dataclass
class InspectRequest:
    """What the request's Inspect options decide."""

    job_options: dict[str, Any]  # reach every job's eval() (inspect_options.eval_kwargs)
    task_args: dict[str, Any] = field(default_factory=dict)  # --task-config and a run config's, under -T
    model_args: dict[str, Any] = field(default_factory=dict)  # --model-config and a run config's, under -M
    run_tasks: list[str] = field(default_factory=list)  # a run config's task
    run_model: str | None = None
    run_epochs: int | None = None
    log_dir: Path | None = None
    log_format: str = "eval"
    sample_shuffle: bool | int | None = None  # the probe shuffles before it selects
    worker_cap: int | None = None  # --max-samples / --max-sandboxes: samples at once per worker
    display: str | None = None
    no_ansi: bool = False

    @property
    def identity(self) -> dict[str, Any] | None:
        """What of the job options changes a result (the fleet id's part)."""
        kept = {k: v for k, v in sorted(self.job_options.items()) if k not in NOT_IDENTITY}
        return kept or None


def read(options: Mapping[str, Any]) -> InspectRequest:
    """Sort the Inspect options the user set (by Inspect's names) and parse the job's."""
    jobs = inspect_options.job_options(options)
    request = InspectRequest(job_options=jobs)
    for name in ("task_config", "model_config"):
        if options.get(name):
            content = inspect_options.read_config_file(name, options[name])
            if not isinstance(content, dict):
                raise BadInput(f"--{name.replace('_', '-')} {options[name]}: no such file")
            setattr(request, name.replace("config", "args"), content)
    if "run_config" in jobs:
        params = _run_config(jobs["run_config"])
        request.run_tasks = split_list(params.get("tasks"))
        request.run_model = params.get("model") if isinstance(params.get("model"), str) else None
        request.task_args = {**dict(params.get("task_args") or {}), **request.task_args}
        request.model_args = {**dict(params.get("model_args") or {}), **request.model_args}
        epochs = params.get("epochs")
        request.run_epochs = getattr(epochs, "epochs", None)
    if options.get("log_dir"):
        request.log_dir = Path(str(options["log_dir"])).expanduser()
    request.log_format = str(options.get("log_format") or "eval")
    caps = [int(options[k]) for k in ("max_samples", "max_sandboxes") if options.get(k) is not None]
    if any(cap < 1 for cap in caps):
        raise BadInput("--max-samples and --max-sandboxes take a count of 1 or more (samples at once per worker)")
    request.worker_cap = min(caps) if caps else None
    request.sample_shuffle = inspect_options.shuffle_of(options.get("sample_shuffle"))
    request.display = options.get("display")
    request.no_ansi = bool(options.get("no_ansi"))
    eval_checks.check_together(options)
    eval_checks.check(jobs)
    return request


def _run_config(content: Any) -> dict[str, Any]:
    if not isinstance(content, dict):
        raise BadInput(f"--run-config {content}: no such file")
    try:
        return inspect_options.run_config_params(content, roles=False)
    except Exception as exc:
        said = " ".join(str(getattr(exc, "message", None) or exc).split())
        raise BadInput(f"--run-config: {said[:300]}") from None


def models(given: Sequence[str], config_model: Any, run_model: str | None, *, plain: bool) -> list[str]:
    """The fleet's models: --model (a,b or repeated), else the run configs', else none/none
    for plain tasks (Inspect's own default) and mockllm/model for a setting's."""
    default = PLAIN_DEFAULT_MODEL if plain else SETTING_DEFAULT_MODEL
    chosen = split_list(given) or split_list(config_model) or split_list(run_model) or [default]
    # Inspect's get_model reads "none" (a task that calls no model) as none/none, which its
    # logs record: the fleet expects each job's log of the model the log will name.
    return list(dict.fromkeys("none/none" if model == "none" else model for model in chosen))


def split_envs(values: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """-e/--env values: a setting's env ([setting:]env), or NAME=value for every job (Inspect's --env)."""
    envs = [value for value in values if "=" not in value]
    pairs = [value for value in values if "=" in value]
    for pair in pairs:
        if not pair.partition("=")[0].isidentifier():
            raise BadInput(f"--env {pair}: write NAME=value with NAME a variable name, or an environment name")
    return envs, inspect_options.env_values(pairs)


# Sandbox types Inspect registers itself: TYPE[:CONFIG] of these is Inspect's form, never
# an external module.
INSPECT_SANDBOXES = ("docker", "local")


def is_inspect_sandbox(value: str) -> bool:
    """--sandbox TYPE[:CONFIG] (Inspect's) rather than module:type (an external sandbox)."""
    kind, sep, rest = value.partition(":")
    return not sep or kind in INSPECT_SANDBOXES or Path(rest).suffix in (".yml", ".yaml") or "/" in rest


def check_sandbox_config(value: str, task_files: Sequence[Path]) -> None:
    """Inspect reads --sandbox TYPE:CONFIG's file relative to each task's directory, which is
    what ships: a config missing there would fail every job."""
    config = value.partition(":")[2]
    if not config or Path(config).is_absolute():
        if config:
            raise BadInput(f"--sandbox {value}: give the config relative to the task's directory, where it ships")
        return
    for task_file in task_files:
        if not (task_file.parent / config).is_file():
            raise BadInput(
                f"--sandbox {value}: no {config} beside {task_file} (Inspect reads it from the task's directory)"
            )
