"""`ct-fleet eval` as a drop-in for `inspect eval`: the same command line, the same logs.

One command line of two tasks x two models, with generate config, limits, a seed, an
epochs reducer, a solver from a file with -S, a model role, --fail-on-error, --env, tags
and metadata, runs once direct (`inspect eval`) and once on the local fleet, against a
loopback OpenAI-compatible server (tests/testkit/openai_stub.py). Each task x model's merged log
must equal the direct run's log of that pair in samples, scores, metrics, config and
generate config; the server must have seen the generate config from both; a sample that
fails 2 times in 6 is a success under --fail-on-error 0.4, as it is in Inspect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.log import EvalLog, read_eval_log

from testkit.fleet import REPO, env_for, model_stub, run_cli

KEY = "sk-stub-" + uuid.uuid4().hex

TASKS = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate, solver


def _samples(times: int, n: int):
    return MemoryDataset([Sample(id=i, input=f"What is {i} times {times}?", target=str(i * times)) for i in range(1, n + 1)])


@task
def sevens(n: int = 3):
    return Task(dataset=_samples(7, n), solver=generate(), scorer=match())


@task
def threes(n: int = 3):
    return Task(dataset=_samples(3, n), solver=generate(), scorer=match())
"""

SOLVERS = """
import os

from inspect_ai.model import get_model
from inspect_ai.solver import solver


@solver
def graded(fail_id: int = 0):
    async def solve(state, generate):
        if state.sample_id == fail_id:
            raise RuntimeError("this sample fails on purpose")
        state = await generate(state)
        # the grader role is a model of its own, of a service no --model names: --model-role
        # and the service's key and URL must reach every job
        checked = await get_model(role="grader").generate(f"What is {state.sample_id} times 2?")
        state.metadata["grader"] = checked.completion
        state.metadata["flag"] = os.environ.get("DROPIN_FLAG")  # --env NAME=value reaches every job
        return state

    return solve
"""

MODELS = "openai-api/stubai/alpha,openai-api/stubai/beta"
# One worker (one warm runner's start) with the slots two would have.
ONE_WORKER_FOUR_SLOTS = [
    "--ec2-arg",
    "idle_timeout=3",
    "--ec2-arg",
    "max_workers=1",
    "--ec2-arg",
    "concurrency_per_worker=4",
]


def _args(log_dir: Path) -> list[str]:
    return [
        "grid.py@sevens",
        "grid.py@threes",
        "--model",
        MODELS,
        "--model-role",
        "grader=openai-api/judges/judge",
        "--temperature",
        "0.3",
        "--seed",
        "7",
        "--max-tokens",
        "64",
        "--message-limit",
        "6",
        "--epochs",
        "2",
        "--epochs-reducer",
        "max",
        "--solver",
        "solvers.py@graded",
        "-S",
        "fail_id=3",
        "--fail-on-error",
        "0.4",
        "--tags",
        "x,y",
        "--metadata",
        "owner=me",
        "--env",
        "DROPIN_FLAG=on",
        "--log-dir",
        str(log_dir),
    ]


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory):
    with model_stub(tmp_path_factory.mktemp("stub"), KEY) as running:
        yield running


def _by_pair(logs: list[EvalLog]) -> dict[tuple[str, str], EvalLog]:
    return {(log.eval.task, log.eval.model): log for log in logs}


def _dump(value: Any) -> Any:
    return value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value


def _samples(log: EvalLog) -> dict[tuple[str, int], Any]:
    return {
        (str(s.id), s.epoch): (
            {k: v.value for k, v in (s.scores or {}).items()},
            s.output.completion if s.output else None,
            s.error.message.splitlines()[0] if s.error else None,
            s.metadata.get("grader"),
            s.metadata.get("flag"),
        )
        for s in log.samples or []
    }


@pytest.fixture(scope="module")
def runs(stub, tmp_path_factory: pytest.TempPathFactory):
    project = tmp_path_factory.mktemp("dropin")
    (project / "grid.py").write_text(TASKS)
    (project / "solvers.py").write_text(SOLVERS)
    secrets = {"STUBAI_API_KEY": KEY, "STUBAI_BASE_URL": stub["base_url"]}
    secrets |= {"JUDGES_API_KEY": KEY, "JUDGES_BASE_URL": stub["base_url"]}  # the grader's service
    direct_dir, fleet_dir = project / "direct", project / "fleet-logs"
    inspect = Path(sys.executable).with_name("inspect")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INSPECT_", "STUBAI_", "JUDGES_"))}
    direct = subprocess.run(
        [str(inspect), "eval", *_args(direct_dir), "--display", "none"],
        cwd=project,
        env={**env, **secrets},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert direct.returncode == 0, direct.stderr[-3000:]
    direct_calls = len((stub["log"]).read_text().splitlines())

    fleet_runs = project / "runs"
    fleet_runs.mkdir()
    (fleet_runs / ".env").write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
    fleet = run_cli(
        ["eval", *_args(fleet_dir), "--json", *ONE_WORKER_FOUR_SLOTS],
        env=env_for(fleet_runs),
        cwd=project,
        timeout=600,
    )
    return {
        "direct": direct,
        "fleet": fleet,
        "direct_dir": direct_dir,
        "fleet_dir": fleet_dir,
        "calls": direct_calls,
        "project": project,
    }


def test_the_fleet_run_succeeds_under_fail_on_error_as_inspect_does(runs):
    fleet = runs["fleet"]
    assert fleet.returncode == 0, fleet.stderr[-3000:]
    outcome = json.loads(fleet.stdout)
    assert outcome["outcome"] == "success"
    assert len(outcome["tasks"]) == 4  # one per task x model


def test_each_task_x_model_reads_like_the_direct_run(runs):
    direct = _by_pair([read_eval_log(str(p)) for p in runs["direct_dir"].glob("*.eval")])
    fleet = _by_pair([read_eval_log(str(p)) for p in runs["fleet_dir"].glob("*.eval")])
    assert len(direct) == 4 and sorted(fleet) == sorted(direct)
    for pair, want in direct.items():
        got = fleet[pair]
        assert got.status == want.status == "success", pair
        assert _samples(got) == _samples(want), pair
        assert sum(1 for s in got.samples or [] if s.error) == 2  # sample 3 in both epochs
        assert _dump(got.results.scores) == _dump(want.results.scores), pair
        for field in ("config", "model_generate_config", "metadata", "solver", "solver_args", "task_args"):
            assert _dump(getattr(got.eval, field)) == _dump(getattr(want.eval, field)), (pair, field)
        assert {k: v.model for k, v in (got.eval.model_roles or {}).items()} == {"grader": "openai-api/judges/judge"}
        assert sorted(got.eval.tags or []) == sorted(want.eval.tags or []) == ["x", "y"]
        assert got.eval.config.epochs_reducer == ["max"] and got.eval.model_generate_config.seed == 7
    # A fleet's logs are a run of their own: ids never another run's
    ids = {(log.eval.eval_id, log.eval.run_id) for log in fleet.values()}
    assert len({eval_id for eval_id, _ in ids}) == 4 and len({run_id for _, run_id in ids}) == 1
    assert not ids & {(log.eval.eval_id, log.eval.run_id) for log in direct.values()}


def test_the_model_server_saw_the_generate_config(runs, stub):
    entries = [json.loads(line) for line in stub["log"].read_text().splitlines()]
    fleet_calls = entries[runs["calls"] :]
    assert fleet_calls, "the fleet made no model call"
    by_model: dict[str, list[dict[str, Any]]] = {}
    for entry in fleet_calls:
        by_model.setdefault(entry["model"], []).append(entry["sent"])
    assert set(by_model) == {"alpha", "beta", "judge"}
    for sent in by_model["alpha"] + by_model["beta"]:
        assert sent == {"temperature": 0.3, "seed": 7, "max_tokens": 64}


API_SCRIPT = """
import json, sys
from inspect_ai import Epochs
from inspect_ai.solver import SolverSpec
from ct_fleet import run_fleet

logs = run_fleet(
    ["grid.py@sevens", "grid.py@threes"],
    model=["openai-api/stubai/alpha", "openai-api/stubai/beta"],
    model_roles={"grader": "openai-api/judges/judge"},
    solver=SolverSpec("solvers.py@graded", {"fail_id": 3}),
    temperature=0.3, seed=7, max_tokens=64, message_limit=6, fail_on_error=0.4,
    epochs=Epochs(2, "max"), tags=["x", "y"], metadata={"owner": "me"},
    ec2_args=["resume=" + sys.argv[1]],
    retry_errors=False,  # sample 3 errs by design: keep its results
)
print(json.dumps({
    "fleet_id": logs.result.fleet_id,
    "resumed": logs.result.resumed,
    "header_only": all(log.samples is None for log in logs),
    "logs": sorted([log.eval.task, log.eval.model, log.status, log.results.model_dump()["scores"]] for log in logs),
}))
"""


def test_run_fleet_takes_what_eval_takes_and_returns_the_merged_logs(runs, tmp_path: Path):
    """The same fleet planned from eval()'s arguments (task names, a list of models, a
    SolverSpec, Epochs, generate config, ...) is the CLI's fleet: resumed, with nothing to
    run, it returns the merged logs' headers and the fleet's result."""
    fleet_id = json.loads(runs["fleet"].stdout)["fleet_id"]
    (runs["project"] / "api.py").write_text(API_SCRIPT)
    env = {k: v for k, v in env_for(runs["project"] / "runs").items() if not k.startswith("INSPECT_")}
    env["PYTHONPATH"] = str(REPO / "lib")
    proc = subprocess.run(
        [sys.executable, "api.py", fleet_id], cwd=runs["project"], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["fleet_id"] == fleet_id and got["resumed"] == 24 and got["header_only"]
    want = sorted(
        [log.eval.task, log.eval.model, log.status, log.results.model_dump()["scores"]]
        for log in (read_eval_log(str(p), header_only=True) for p in runs["fleet_dir"].glob("*.eval"))
    )
    assert got["logs"] == json.loads(json.dumps(want)) and len(want) == 4
