"""Knobs to and from fleet.env: the ones that reach workers, each under its declared
fleet.env name, and back on the worker as its own type."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..error_lines import shown
from ..errors import BadInput
from . import knob_rules as r
from .knobs import DEFAULT_REGION, Ec2Config, info, knob_fields


def to_worker_env(cfg: Ec2Config) -> dict[str, str]:
    """The knobs that reach workers, as fleet.env text: NAME -> value (empty ones left out)."""
    out: dict[str, str] = {}
    for f in knob_fields(type(cfg)):
        name = info(f).worker
        value = getattr(cfg, f.name)
        if name is None or value is None or value == "":
            continue
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def check_worker_types(cfg: Ec2Config) -> None:
    """Each knob that reaches workers holds a value of its own type: a wrong one would reach
    the worker as its str()."""
    hints = typing.get_type_hints(type(cfg))
    for f in knob_fields(type(cfg)):
        name = info(f).worker
        if name is None:
            continue
        value = getattr(cfg, f.name)
        try:
            TypeAdapter(hints[f.name]).validate_python(value, strict=True)
        except ValidationError:
            raise BadInput(f"fleet setting {name}={value!r} is not of type {hints[f.name]}") from None


def from_worker_env(env: Mapping[str, str], cls: type[Ec2Config] = Ec2Config) -> Ec2Config:
    """Knobs back from fleet.env on a worker, each as its type (the controller checked the
    rules); an absent one takes the EC2 default (a step rerun by hand with a partial fleet.env)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in knob_fields(cls):
        name = info(f).worker
        raw = env.get(name) if name else None
        if raw is None or raw == "":
            continue
        try:
            values[f.name] = TypeAdapter(hints[f.name]).validate_python(raw)
        except ValidationError as exc:
            raise BadInput(f"fleet.env {name}={shown(raw)}: {r.reason(exc)}") from None
    return cls(**values).for_cloud("aws", DEFAULT_REGION)
