"""The `.env` that `inspect eval` reads: the first one from the working directory upward.

Inspect loads it before it reads its options, so a project's INSPECT_EVAL_MODEL, its
INSPECT_EVAL_* options and its model keys there are what a direct run uses. `ct-fleet eval`
started in the same directory reads the same file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from inspect_ai.log import list_eval_logs, read_eval_log

from ct_fleet.cli.main import cli
from ct_fleet.controller.planning import (
    FleetRequest,
    apply_inspect_variables,
    from_eval_args,
    plan_fleet,
    project_dotenv,
)

TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import includes
from inspect_ai.solver import solver


@solver
def answer():
    async def solve(state, generate):
        state.output = ModelOutput.from_content("answer", "4")
        return state

    return solve


@task
def sums(grader: str = ""):
    return Task(dataset=[Sample(id=i, input="2 + 2?", target="4") for i in range(1, 10)], solver=answer(), scorer=includes())
"""


SET_HERE = ("INSPECT_EVAL_MODEL", "INSPECT_EVAL_TEMPERATURE", "INSPECT_LOG_DIR", "INSPECT_EVAL_LIMIT")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """evals/.env and evals/sub/t.py, with the working directory in evals/sub (the file is found upward)."""
    root = tmp_path / "evals"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "t.py").write_text(TASK)
    monkeypatch.chdir(root / "sub")
    # None set by the shell, and what the code under test sets is taken away again after the test.
    for name in [n for n in os.environ if n.startswith("INSPECT_")] + ["OPENAI_API_KEY", *SET_HERE]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return root


def test_its_inspect_variables_are_the_ones_a_direct_run_takes(project: Path):
    (project / ".env").write_text(
        "INSPECT_EVAL_MODEL=mockllm/from-dotenv\nINSPECT_EVAL_TEMPERATURE=0.3\nINSPECT_LOG_DIR=logs-here\n"
        "INSPECT_EVAL_LIMIT=5\nOPENAI_API_KEY=sk-from-dotenv\n"
    )
    shell = {"INSPECT_EVAL_LIMIT": "7"}  # the shell's own wins over the file, for Inspect too
    direct = subprocess.run(
        [str(Path(sys.executable).with_name("inspect")), "eval", "t.py", "--display", "none"],
        env={**os.environ, **shell},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert direct.returncode == 0, direct.stderr
    (info,) = list_eval_logs(str(project / "logs-here"))  # its relative log dir is the file's
    log = read_eval_log(info.name, header_only=True)

    environ = dict(shell)
    apply_inspect_variables(project_dotenv(), environ)
    assert environ == {
        "INSPECT_EVAL_MODEL": log.eval.model,
        "INSPECT_EVAL_TEMPERATURE": str(log.eval.model_generate_config.temperature),
        "INSPECT_LOG_DIR": (project / "logs-here").as_posix(),
        "INSPECT_EVAL_LIMIT": str(log.eval.config.limit),
    }  # and its other lines (OPENAI_API_KEY) are secrets, never the environment's
    # run_fleet() with no model, as eval(): the file's INSPECT_EVAL_MODEL.
    assert from_eval_args(["t.py"], None, fleet={"environ": {}}).models == [log.eval.model]


def test_ct_fleet_eval_takes_its_model_and_the_models_key(project: Path, tmp_path: Path):
    (project / ".env").write_text("INSPECT_EVAL_MODEL=openai/gpt-4o-mini\n")
    runs = tmp_path / "runs"
    result = CliRunner().invoke(cli, ["eval", "t.py"], env={"CT_FLEET_RUNS": str(runs), "CT_FLEET_DOTENV": "none.env"})
    assert result.exit_code == 2, result.output
    assert "OPENAI_API_KEY" in result.output and not runs.exists(), result.output

    # With the key in the same file the fleet plans, its workers get the key as a secret,
    # and ct-fleet's own .env still wins where both set a value.
    (project / ".env").write_text(
        "INSPECT_EVAL_MODEL=openai/gpt-4o-mini\nOPENAI_API_KEY=sk-project\nGH_TOKEN=gh-x\nAWS_ACCESS_KEY_ID=AKIAPROJECT\n"
    )
    own = tmp_path / "own.env"
    own.write_text("GH_TOKEN=gh-own\n")
    runs.mkdir()
    # Its INSPECT_* lines are options, not secrets: a task argument may repeat one.
    request = FleetRequest(
        tasks=["t.py"],
        models=["openai/gpt-4o-mini"],
        task_args=["grader=openai/gpt-4o-mini"],
        runs_dir=runs,
        dotenv=own,
    )
    planned = plan_fleet(request)
    assert "OPENAI_API_KEY" in planned.spec.secret_names
    assert (planned.dotenv["OPENAI_API_KEY"], planned.dotenv["GH_TOKEN"]) == ("sk-project", "gh-own")
    # Its AWS lines never choose the fleet's account: only the shell and ct-fleet's own .env do.
    assert "INSPECT_EVAL_MODEL" not in planned.dotenv and "AWS_ACCESS_KEY_ID" not in planned.dotenv
