"""YAML run configs (--config): option defaults and ec2_args, per attack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import BadInput
from . import config


def load_run_config(path: Path | None, attack: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(option defaults, ec2_args) from a YAML run config; the chosen attack's keys win."""
    if path is None:
        if attack:
            raise BadInput("--attack needs --config")
        return {}, {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a mapping (task or task_file, policy, model, epochs, ec2, ec2_args, attacks)")
    allowed = {
        "task",
        "task_args",
        "model_args",
        "limit",
        "sample_id",
        "task_file",
        "setting",
        "envs",
        "requirements",
        "policy",
        "epochs",
        "model",
        "ec2",
        "ec2_args",
        "attacks",
    }
    unknown = set(data) - allowed
    if unknown:
        raise BadInput(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")
    options = {k: data[k] for k in allowed - {"ec2_args", "attacks"} if k in data}
    ec2_args = config.from_mapping(data.get("ec2_args") or {}, f"{path}: ec2_args")
    attacks = data.get("attacks") or []
    names = [str(a.get("name")) for a in attacks if isinstance(a, dict)]
    if attacks and attack is None and len(attacks) > 1:
        raise BadInput(f"{path} has several attacks: choose one with --attack ({', '.join(names)})")
    if attacks:
        chosen = attacks[0] if attack is None else next((a for a in attacks if str(a.get("name")) == attack), None)
        if chosen is None:
            raise BadInput(f"no attack {attack!r} in {path}: choose one of {', '.join(names)}")
        options.update({k: chosen[k] for k in ("policy", "epochs", "model", "task_file") if k in chosen})
        ec2_args.update(config.from_mapping(chosen.get("ec2_args") or {}, f"{path}: attack {chosen.get('name')}"))
    elif attack:
        raise BadInput(f"{path} has no attacks")
    return options, ec2_args
