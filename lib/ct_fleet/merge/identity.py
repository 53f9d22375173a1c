"""Which logs belong to the same task: the identity fields of a log header."""

from __future__ import annotations

import hashlib
from typing import Any

from .util import canonical, without

RUNTIME_GENERATE_FIELDS = frozenset(
    {
        "max_retries",
        "timeout",
        "attempt_timeout",
        "stream_idle_timeout",
        "max_connections",
        "adaptive_connections",
        "batch",
        "cache",
        "cache_prompt",
    }
)


IDENTITY_CONFIG_FIELDS = (
    "epochs_reducer",
    "message_limit",
    "token_limit",
    "token_limit_type",
    "turn_limit",
    "time_limit",
    "working_limit",
    "cost_limit",
    "score_on_error",
    "approval",
)


def identity(header: dict[str, Any]) -> dict[str, Any]:
    """The fields of a log header that make two logs the same task (see module doc).

    Leaves out what differs per worker: eval/run/task ids, creation time, the selected
    sample ids and epochs, the task file's directory, sandbox config paths, runtime
    and transport options, tags and metadata.
    """
    ev = header.get("eval") or {}
    plan = header.get("plan") or {}
    config = ev.get("config") or {}
    dataset = ev.get("dataset") or {}
    task_file = ev.get("task_file")
    roles = ev.get("model_roles") or {}
    solver = ev.get("solver")

    def role(cfg: dict[str, Any]) -> dict[str, Any]:
        cfg = {k: v for k, v in cfg.items() if k != "base_url"}
        if isinstance(cfg.get("config"), dict):
            cfg["config"] = without(cfg["config"], RUNTIME_GENERATE_FIELDS)
        return cfg

    return {
        "task": ev.get("task"),
        "task_version": ev.get("task_version", 0),
        "task_file": task_file.replace("\\", "/").rsplit("/", 1)[-1] if task_file else None,
        "task_registry_name": ev.get("task_registry_name"),
        "task_args": ev.get("task_args") or {},
        # a --solver file is named by the path each worker had it at: its file name is its identity
        "solver": solver.replace("\\", "/").rsplit("/", 1)[-1] if isinstance(solver, str) else solver,
        "solver_args": ev.get("solver_args"),
        "model": ev.get("model"),
        "model_args": ev.get("model_args") or {},
        "model_generate_config": without(ev.get("model_generate_config") or {}, RUNTIME_GENERATE_FIELDS),
        "model_roles": {
            name: [role(c) for c in cfg] if isinstance(cfg, list) else role(cfg) for name, cfg in roles.items()
        },
        "dataset": {k: dataset.get(k) for k in ("name", "location", "samples", "shuffled")},
        "scorers": ev.get("scorers"),
        "metrics": ev.get("metrics"),
        "config": {k: config.get(k) for k in IDENTITY_CONFIG_FIELDS},
        "plan": {
            "name": plan.get("name"),
            "steps": [without(s, {"params"}) for s in plan.get("steps") or []],
            "config": without(plan.get("config") or {}, RUNTIME_GENERATE_FIELDS),
        },
    }


def identity_key(header: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(identity(header))).hexdigest()
