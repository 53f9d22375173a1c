"""Knob values from where users write them: `--ec2-arg key=value` pairs and a run
config's `ec2_args:` mapping, each value checked against its knob's type and rule
(protocol/knob_rules.py) and named in a one-line BadInput when it fails."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from ..error_lines import shown
from ..errors import BadInput
from .knobs import Ec2Config, check_value, knob_names


def _coerce(key: str, raw: Any, where: str, cls: type[Ec2Config]) -> Any:
    if isinstance(raw, str):
        raw = raw.strip()
        if raw.lower() in ("none", "null", ""):
            raw = None
    if raw is None and type(None) not in typing.get_args(typing.get_type_hints(cls)[key]):
        raise BadInput(f"{where} {key} needs a value (see `ct-fleet eval --help`)")
    return check_value(key, raw, where, cls)


def _check_key(key: str, cls: type[Ec2Config]) -> None:
    names = knob_names(cls)
    if key not in names:
        close = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise BadInput(f"unknown --ec2-arg {key!r}{hint}; see `ct-fleet eval --help` for the list")


def parse_ec2_args(pairs: Iterable[str], cls: type[Ec2Config] = Ec2Config) -> dict[str, Any]:
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep:
            raise BadInput(f"--ec2-arg {pair!r}: write key=value")
        _check_key(key, cls)
        values[key] = _coerce(key, raw, "--ec2-arg", cls)  # a bad value is named for itself first
        if key in given:
            # Which one was meant is a guess either way; a silent last-wins hides a typo.
            raise BadInput(
                f"--ec2-arg {key} is given twice ({key}={shown(given[key])} and {key}={shown(raw)}): keep one"
            )
        given[key] = raw
    return values


def from_mapping(mapping: object, where: str, cls: type[Ec2Config] = Ec2Config) -> dict[str, Any]:
    """ec2_args from a YAML run config: same keys and types as --ec2-arg."""
    if not isinstance(mapping, dict):
        raise BadInput(f"{where}: ec2_args must be a mapping of key: value")
    values = {}
    for key, raw in mapping.items():
        _check_key(str(key), cls)
        values[str(key)] = _coerce(str(key), raw, f"{where}:", cls)
    return values


def build_config(*layers: Mapping[str, Any], cls: type[Ec2Config] = Ec2Config) -> Ec2Config:
    """Later layers win: run config, then the attack's ec2_args, then the command line."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return cls(**merged)
