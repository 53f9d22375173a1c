"""What Inspect checks only as its run starts is checked before a fleet starts: on a fleet
the same mistake would be a fleet of failed jobs, so here it is one line and exit 2.

- The models a run names besides --model: model roles (--model-role, a run config's
  model_roles, a task's Task(model_roles=...)), each checked as --model is (provider, key)
  with its key sent to the workers, a key in a .env only as good as for a direct `inspect
  eval`; and the prices a cost limit needs. The tests/dropin/test_inspect_dropin.py fleet
  runs a grader role of a service no --model names, against a direct run.
- --solver, --approval, --review and --sentinel, made in the task's probe as a job's eval()
  makes them, judged against Inspect's own command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ct_fleet.controller.planning import FleetRequest, plan_fleet
from ct_fleet.errors import BadInput
from ct_fleet.inspect_private import inspect_eval_command
from testkit.task_files import NO_MODEL_CALL

# t, a task whose grader role is a model of its own, and one with a cost limit of its own
TASK = (
    NO_MODEL_CALL
    + """

@task
def graded():
    return Task(dataset=[Sample(id=1, input="x")], solver=nothing(), model_roles={"grader": "openai/gpt-4o-mini"})


@task
def budgeted():
    return Task(dataset=[Sample(id=1, input="x")], solver=nothing(), cost_limit=1.0)
"""
)

GRADER = "openai/gpt-4o-mini"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """t.py in a directory of its own, the working directory; no OpenAI key anywhere yet."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "t.py").write_text(TASK)
    monkeypatch.chdir(root)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return root


def _plan(
    project: Path, task: str = "t.py@t", *, dotenv: str = "", model: str = "mockllm/model", **options: object
) -> list[str]:
    """Plan a fleet of TASK (nothing is created) with ct-fleet's own .env holding DOTENV: the
    names of the secrets its workers would get."""
    own = project.parent / "own.env"
    own.write_text(dotenv)
    runs = project.parent / "runs"
    runs.mkdir(exist_ok=True)
    request = FleetRequest(
        tasks=[task],
        models=[model],
        inspect_options=options,
        runs_dir=runs,
        dotenv=own,
        environ={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
    )
    return list(plan_fleet(request).spec.secret_names)


@pytest.mark.parametrize(
    "options",
    [
        {"model_role": (f"grader={GRADER}",)},
        {"model_role": (f"grader={{model: {GRADER}, temperature: 0.2}}",)},
        {"model_role": (f"grader=mockllm/model,{GRADER}",)},
        {"run_config": "run.yaml"},
    ],
    ids=["name", "mapping", "list", "run config"],
)
def test_a_roles_model_needs_its_key_and_its_workers_get_it(project: Path, options: dict[str, object]):
    (project / "run.yaml").write_text(f"model_roles:\n  grader:\n    model: {GRADER}\n")
    with pytest.raises(BadInput, match=f"grader.*{GRADER}: OPENAI_API_KEY is not set"):
        _plan(project, **options)
    # The key in a .env only (the controller's own environment has none): the role's client
    # is not built here, and the workers get the key as --model's would.
    assert _plan(project, dotenv="OPENAI_API_KEY=sk-in-dotenv\n", **options) == ["OPENAI_API_KEY"]


def test_a_roles_unknown_provider_is_refused_before_anything_starts(project: Path):
    with pytest.raises(BadInput, match="^--model-role grader=nope/x: unknown provider 'nope'"):
        _plan(project, model_role=("grader=nope/x",))


def test_a_tasks_own_roles_load_with_a_dotenv_key_and_it_reaches_the_workers(project: Path):
    """Inspect builds a task's role models as it loads it: the probe loads it with the .env a
    direct run would have read, and the role's key goes to the workers."""
    with pytest.raises(BadInput, match=r"does not load from what ships: .*No OPENAI_API_KEY") as refused:
        _plan(project, "t.py@graded")
    assert "[bold]" not in str(refused.value)  # Inspect's rich markup, shown as a terminal shows it
    (project / ".env").write_text("OPENAI_API_KEY=sk-project\n")  # the project's, as inspect eval reads it
    assert _plan(project, "t.py@graded") == ["OPENAI_API_KEY"]


# Inspect's own command on cost limits, in a process of its own: prices given with
# --model-cost-config stay registered in the process that read them (the runs without
# prices come first).
DIRECT_COSTS = """
import json, sys
from click.testing import CliRunner
from inspect_ai.log import list_eval_logs, read_eval_log
from ct_fleet.inspect_private import inspect_eval_command

def run(log_dir, task, *args):
    argv = [task, "--model", sys.argv[1], *args, "--log-dir", log_dir, "--display", "none"]
    code = CliRunner().invoke(inspect_eval_command, argv).exit_code
    logs = [read_eval_log(info.name) for info in list_eval_logs(log_dir)]
    return [code, [log.error.message if log.error else log.status for log in logs]]

print(json.dumps([
    run("unpriced", "t.py@t", "--cost-limit", "1"),
    run("own", "t.py@budgeted"),
    run("priced", "t.py@t", "--cost-limit", "1", "--model-cost-config", "costs.yaml"),
    run("negative", "t.py@t", "--cost-limit", "-0.5", "--model-cost-config", "costs.yaml"),
    run("own-priced", "t.py@budgeted", "--model-cost-config", "costs.yaml"),
]))
"""


def test_a_cost_limit_needs_every_models_prices_as_inspect_eval_does(project: Path):
    costs = f"{GRADER}: {{input: 0.15, output: 0.6, input_cache_write: 0, input_cache_read: 0}}\n"
    (project / "costs.yaml").write_text(costs)
    direct = subprocess.run(
        [sys.executable, "-c", DIRECT_COSTS, GRADER],
        env={**os.environ, "OPENAI_API_KEY": "sk-placeholder"},  # Inspect builds the client; no request is made
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    unpriced, own, priced, negative, own_priced = json.loads(direct.stdout.splitlines()[-1])
    assert unpriced == own == [1, []] and priced == own_priced == [0, ["success"]]
    assert negative[0] == 0 and "Cost limit value must be a non-negative float" in negative[1][0]

    key = "OPENAI_API_KEY=sk-in-dotenv\n"
    with pytest.raises(
        BadInput,
        match=rf"^a cost limit \(--cost-limit, or a task's own\) needs the prices of {GRADER}: .*--model-cost-config",
    ):
        _plan(project, dotenv=key, model=GRADER, cost_limit=1.0)
    assert _plan(project, dotenv=key, model=GRADER, cost_limit=1.0, model_cost_config="costs.yaml")
    with pytest.raises(BadInput, match=f"needs the prices of {GRADER}:"):
        _plan(project, "t.py@budgeted", dotenv=key, model=GRADER)
    assert _plan(project, "t.py@budgeted", dotenv=key, model=GRADER, model_cost_config="costs.yaml")
    with pytest.raises(BadInput, match="^--cost-limit -0.5: Cost limit value must be a non-negative float"):
        _plan(project, dotenv=key, model=GRADER, cost_limit=-0.5, model_cost_config="costs.yaml")
    # a role's model is priced too, as Inspect prices every model of a task
    with pytest.raises(BadInput, match="needs the prices of openai/gpt-4o:"):
        _plan(
            project,
            dotenv=key,
            model=GRADER,
            cost_limit=1.0,
            model_cost_config="costs.yaml",
            model_role=("grader=openai/gpt-4o",),
        )


@pytest.mark.parametrize(
    "options",
    [
        {"solver": "solvers.py@nothing"},  # a file of its own
        {"solver": "nothing"},  # registered by the task's own module
        {"solver": "solvers.py@nope"},
        {"solver": "nope"},
        {"approval": "auto"},
        {"approval": "approval.yaml"},  # an approver nobody registered
        {"approval": "nope.yaml"},
        {"review": "nope.yaml"},
        {"sentinel": "nope"},
    ],
    ids=str,
)
def test_a_solver_approval_review_or_sentinel_is_refused_exactly_when_inspect_eval_refuses_it(
    project: Path, options: dict[str, str]
):
    (project / "solvers.py").write_text(NO_MODEL_CALL)
    (project / "approval.yaml").write_text("approvers:\n  - name: nope\n    tools: '*'\n")
    (name, value), *_ = options.items()
    args = ["t.py@t", "--model", "mockllm/model", f"--{name}", value, "--log-dir", "logs", "--display", "none"]
    direct = CliRunner().invoke(inspect_eval_command, args)
    try:
        _plan(project, **options)
        refused = ""
    except BadInput as exc:
        refused = str(exc)
    assert (direct.exit_code == 0) == (not refused), (options, direct.exception, refused)
    assert refused.startswith(f"--{name}") or not refused
