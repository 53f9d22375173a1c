"""Typed schemas of the user's files: run configs (--config) and task files (--task-file).

Strict pydantic models: no key the schema does not name, no silent coercion ("3" is not
an epoch count, `true` is not a task name). `refusal` turns pydantic's report into the
one line a user reads.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from ...errors import BadInput

MAX_EPOCHS = 10_000
MAX_ATTACKS = 100

# A name as it reaches sample ids, job ids and tables: one printable line.
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
Epochs = Annotated[int, Field(ge=1, le=MAX_EPOCHS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Attack(_Strict):
    name: Name
    task_file: Name | None = None
    policy: Name | None = None
    model: Name | None = None
    epochs: Epochs | None = None
    ec2_args: dict[str, Any] | None = None


# A -T / -M value as YAML gives it: a scalar or a list of scalars.
Scalar = str | int | float | bool | None
ArgValue = Scalar | list[Scalar]


class RunConfig(_Strict):
    task: Name | None = None
    task_args: dict[Name, ArgValue] | None = None
    model_args: dict[Name, ArgValue] | None = None
    limit: Annotated[int, Field(ge=1)] | Name | None = None
    sample_id: Name | int | list[Name | int] | None = None
    task_file: Name | None = None
    setting: Name | None = None
    envs: list[Name] | None = None
    requirements: Name | list[Name] | None = None
    ec2: bool | None = None
    policy: Name | None = None
    model: Name | None = None
    epochs: Epochs | None = None
    ec2_args: dict[str, Any] | None = None
    attacks: Annotated[list[Attack], Field(max_length=MAX_ATTACKS)] | None = None

    @field_validator("attacks")
    @classmethod
    def _unique_names(cls, attacks: list[Attack] | None) -> list[Attack] | None:
        names = [a.name for a in attacks or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"attack name(s) used twice: {', '.join(twice)}")
        return attacks


class TaskEntry(_Strict):
    env: Name
    main_task: Name
    side_task: Name | None = None
    setting: Name | None = None


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def refusal(exc: ValidationError, source: str, model: type[BaseModel]) -> BadInput:
    """The first problem pydantic found, as one line naming the file, the place and the fix."""
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    where = _where(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        owner: Any = model
        for part in loc[:-1]:
            if isinstance(part, str):
                owner = _nested(owner, part)
        allowed = ", ".join(owner.model_fields) if isinstance(owner, type) and issubclass(owner, BaseModel) else ""
        return BadInput(f"{source}: unknown key {where!r}" + (f"; allowed: {allowed}" if allowed else ""))
    if kind == "missing":
        return BadInput(f"{source}: {where} is required")
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "string_pattern_mismatch":
        message = "must be one line of printable text"
    return BadInput(f"{source}: {where}: {message}" if where else f"{source}: {message}")


def _nested(model: Any, name: str) -> Any:
    """The model class of a field (through list[...] and | None), for naming allowed keys."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    field = model.model_fields.get(name)
    if field is None:
        return None
    stack = [field.annotation]
    while stack:
        hint = stack.pop()
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return hint
        stack.extend(getattr(hint, "__args__", ()) or ())
        origin = getattr(hint, "__origin__", None)
        if origin is not None:
            stack.extend(getattr(origin, "__args__", ()) or ())
    return None


def validate(model: type[_Strict], data: Any, source: str) -> Any:
    if not isinstance(data, dict):
        keys = ", ".join(model.model_fields)
        raise BadInput(f"{source}: expected a mapping with keys {keys}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise refusal(exc, source, model) from None
