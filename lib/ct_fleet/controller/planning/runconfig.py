"""YAML run configs (--config): option defaults and ec2_args, per attack (schema: schemas.RunConfig)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import BadInput
from ...protocol import knob_parsing as config
from . import safe_yaml, schemas

MAX_BYTES = 1 << 20

OPTIONS = (
    "task",
    "task_args",
    "model_args",
    "limit",
    "sample_id",
    "task_file",
    "setting",
    "envs",
    "requirements",
    "ec2",
    "policy",
    "epochs",
    "model",
)
ATTACK_OPTIONS = ("task_file", "policy", "epochs", "model")


def load_run_config(path: Path | None, attack: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(option defaults, ec2_args) from a YAML run config; the chosen attack's keys win."""
    if path is None:
        if attack:
            raise BadInput("--attack needs --config")
        return {}, {}
    data = safe_yaml.load(safe_yaml.read_text(path, max_bytes=MAX_BYTES, what="run config"), str(path)) or {}
    run: schemas.RunConfig = schemas.validate(schemas.RunConfig, data, str(path))
    options = {k: getattr(run, k) for k in OPTIONS if getattr(run, k) is not None}
    ec2_args = config.from_mapping(run.ec2_args or {}, f"{path}: ec2_args")
    attacks = run.attacks or []
    names = [a.name for a in attacks]
    if attacks and attack is None and len(attacks) > 1:
        raise BadInput(f"{path} has several attacks: choose one with --attack ({', '.join(names)})")
    if attacks:
        chosen = attacks[0] if attack is None else next((a for a in attacks if a.name == attack), None)
        if chosen is None:
            raise BadInput(f"no attack {attack!r} in {path}: choose one of {', '.join(names)}")
        options.update({k: getattr(chosen, k) for k in ATTACK_OPTIONS if getattr(chosen, k) is not None})
        ec2_args.update(config.from_mapping(chosen.ec2_args or {}, f"{path}: attack {chosen.name}: ec2_args"))
    elif attack:
        raise BadInput(f"{path} has no attacks")
    return options, ec2_args
