"""What Inspect checks only as its run starts, or as a sample starts, checked while the
fleet is planned: on a fleet the same mistake would be a fleet of failed jobs.

- every option, parsed by Inspect's own parsers as each job will parse it (eval_kwargs);
- a limit its run cannot take, and a count of nothing at once (check_bounds);
- options it refuses together (check_together; --sample-id with --sample-shuffle: choosing.py);
- --solver, --approval, --review and --sentinel, made in the task's probe (probe_options);
- each model role, read as Inspect reads it but without building the role's model client,
  which needs a key that only the workers may be given (role_models); planner.py checks
  each role's model and key as --model's, and the prices --cost-limit needs (models.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import BadInput, plain
from ...inspect_options import eval_kwargs


@dataclass(frozen=True)
class RoleModel:
    """A model a role names (--model-role, a run config's model_roles)."""

    role: str
    model: str
    model_args: dict[str, Any]  # its model_args, with its base_url when it gives one


def role_models(options: Mapping[str, Any]) -> list[RoleModel]:
    """The models the roles name, each role's as a job's eval() will take it (the command
    line's over a run config's), checked as Inspect checks them (parse_model_role_cli_args,
    resolve_model_roles, RunConfigInput) but without building a model client: that needs
    the provider's key, which planning checks and the workers are given."""
    from inspect_ai.model import GenerateConfig
    from pydantic import ValidationError

    from ...inspect_private import RunConfigInput, parse_cli_args

    roles: dict[str, Any] = {}
    content = options.get("run_config")
    if isinstance(content, Mapping) and content.get("model_roles"):
        try:
            config = RunConfigInput.model_validate({"model_roles": content["model_roles"]})
        except ValidationError as exc:
            raise BadInput(f"--run-config model_roles: {_first_error(exc)}") from None
        for role, given in config.model_roles.items():
            roles[role] = [
                {"model": m.model, "model_args": {**m.args, **({"base_url": m.base_url} if m.base_url else {})}}
                for m in (given if isinstance(given, list) else [given])
            ]
    if options.get("model_role"):
        try:
            roles.update(parse_cli_args(tuple(options["model_role"]), force_str=False))
        except Exception:
            raise BadInput(
                "--model-role: write ROLE=provider/model, or ROLE={model: provider/model, temperature: 0.5}"
            ) from None
    found = []
    for role, value in roles.items():
        items = [v.strip() if isinstance(v, str) else v for v in value] if isinstance(value, list) else [value]
        items = [v for v in items if v != ""]
        if not items or not all(isinstance(v, str | dict) for v in items):
            raise BadInput(
                f"--model-role {role}: give it a model (provider/model), several (a,b) or "
                f"{{model: provider/model, ...}}, not {value!r}"
            )
        for item in items:
            if isinstance(item, str):
                found.append(RoleModel(role, item, {}))
                continue
            params = dict(item)
            model, model_args = params.pop("model", None), params.pop("model_args", {})
            if not isinstance(model, str) or not isinstance(model_args, dict):
                raise BadInput(f"--model-role {role}: give model: provider/model, and model_args as a mapping")
            try:
                GenerateConfig(**params)
            except ValidationError as exc:
                raise BadInput(f"--model-role {role}: {_first_error(exc)}") from None
            found.append(RoleModel(role, model, model_args))
    return found


def _first_error(exc: Any) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


# Values Inspect's command line takes but its run cannot: a negative limit fails every sample
# as it starts (its own limit types say why), no connection at all waits forever.
_LIMITS = ("message_limit", "turn_limit", "time_limit", "working_limit", "cost_limit")
_COUNTS = ("max_connections", "max_subprocesses")


def check_bounds(options: Mapping[str, Any]) -> None:
    import inspect_ai.util

    for name in _LIMITS:
        if options.get(name) is not None:
            try:
                getattr(inspect_ai.util, name)(options[name])
            except ValueError as exc:
                raise BadInput(f"--{name.replace('_', '-')} {options[name]}: {exc}") from None
    for name in _COUNTS:
        if options.get(name) is not None and int(options[name]) < 1:
            raise BadInput(f"--{name.replace('_', '-')} {options[name]}: give a count of 1 or more")


def check_together(options: Mapping[str, Any]) -> None:
    """Options Inspect refuses together, though one of them means something else here: a
    fleet's jobs always write .eval, --log-format is the merged logs' format."""
    if options.get("log_shared") and options.get("log_format") == "json":
        raise BadInput("--log-shared is not compatible with --log-format json (inspect eval refuses them together)")


def check(options: Mapping[str, Any]) -> None:
    """Parse the job options as a job will, here: what Inspect refuses is bad input now, and
    what its run would fail on (check_bounds). The roles' models are checked without their
    clients (role_models)."""
    check_bounds(options)
    role_models(options)
    without_roles = {k: v for k, v in options.items() if k != "model_role"}
    if isinstance(options.get("run_config"), Mapping):
        without_roles["run_config"] = {k: v for k, v in options["run_config"].items() if k != "model_roles"}
    try:
        eval_kwargs(without_roles)
    except BadInput:
        raise
    except Exception as exc:
        said = " ".join(plain(str(getattr(exc, "message", None) or exc)).split())
        raise BadInput(f"{said[:300]} (as inspect eval would refuse it)") from None


def every_role_model(options: Mapping[str, Any], task_roles: set[tuple[str, str]]) -> list[tuple[RoleModel, str]]:
    """The models the roles name, each with how it was given: the command's (--model-role, a
    run config's), and a task's own (Task(model_roles=...)) for a role the command does not
    set, as eval() merges them."""
    command = role_models(options)
    set_here = {role.role for role in command}
    return [(role, f"--model-role {role.role}={role.model}") for role in command] + [
        (RoleModel(role, model, {}), f"a task's model role {role}={model}")
        for role, model in sorted(task_roles)
        if role not in set_here
    ]


def probe_options(options: Mapping[str, Any], image: Path, extra_dir: Path) -> dict[str, Any]:
    """What the probe makes once a task is loaded, as a job's eval() will (probe.py): the
    --solver where it ships, with its -S and --solver-config args; --approval, --review and
    --sentinel (with its args)."""
    from ...inspect_private import parse_cli_config

    names = ("approval", "review", "sentinel", "sentinel_arg")
    found: dict[str, Any] = {name: options[name] for name in names if options.get(name)}
    if options.get("solver"):
        root = {"code": image, "extra": extra_dir}.get(str(options.get("solver_root")))
        path = options.get("solver_path")
        found["solver"] = str(root / path) if root is not None and path else options["solver"]
        found["solver_args"] = parse_cli_config(options.get("s"), options.get("solver_config"))
    return found
