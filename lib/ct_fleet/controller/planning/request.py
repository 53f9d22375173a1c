"""What a researcher asks for: the fields of `ct-fleet eval`, and the environment it ran in.

The environment is read once, when a request is made (the CLI's edge); planning and the
run read it from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...paths import REPO_ROOT, runs_dir


def _environ() -> dict[str, str]:
    return dict(os.environ)


@dataclass
class FleetRequest:
    tasks: Sequence[str] = ()  # plain Inspect tasks: file.py, file.py@name or a registered name
    task_args: Sequence[str] = ()  # -T key=value
    model_args: Sequence[str] = ()  # -M key=value
    sample_ids: Sequence[str] = ()  # --sample-id ID[,ID...]
    limit: str | None = None  # --limit N or START-STOP
    task_file: str | None = None
    envs: Sequence[str] = ()
    main_tasks: Sequence[str] = ()
    side_tasks: Sequence[str] = ()
    policy: str | None = None
    epochs: int | None = None
    models: Sequence[str] = ()  # --model a,b (or repeated): every task runs with each
    command: str | None = None
    sandbox: str | None = None
    extra_src: Sequence[Path] = ()
    requirements: Sequence[str] = ()  # -r: requirements, wheels, requirements files
    config_path: Path | None = None
    attack: str | None = None
    ec2: bool | None = None  # None: the run config's `ec2:`, else CT_FLEET_EC2, else the local fleet
    ec2_args: Sequence[str] = ()  # key=value pairs, as on the command line
    retry_errors: bool | None = None  # --retry-errors/--no-retry-errors (the knob retry_errors)
    # Inspect's `eval` options the user set, by Inspect's names (ct_fleet.inspect_options)
    inspect_options: Mapping[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=_environ)
    runs_dir: Path | None = None  # None: CT_FLEET_RUNS, else runs/ in the checkout
    dotenv: Path | None = None  # None: CT_FLEET_DOTENV, else .env in the checkout

    def __post_init__(self) -> None:
        if self.runs_dir is None:
            self.runs_dir = runs_dir(self.environ)
        if self.dotenv is None:
            self.dotenv = dotenv_path(self.environ)


def dotenv_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("CT_FLEET_DOTENV") or REPO_ROOT / ".env")
