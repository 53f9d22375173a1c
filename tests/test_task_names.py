"""Whatever a task is called, the exit status comes from what its merged run holds.

A task's name is not its merged file's stem: `inspect_evals/foo` is written as
`inspect_evals_foo.eval`. A run of a registered task from an installed package (a wheel
built here, in a venv of its own that local workers share) and of a file task whose name
has a slash must exit 0 when every sample succeeded, not report the task as without results.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from fleet_helpers import FAST, ONE_WORKER, REPO, env_for, fleet_dir, run_cli

sys.path.insert(0, str(Path(__file__).parent))
from wheelmaker import write_wheel

SOLVER = """from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, Solver, TaskState, solver


@solver
def say_done() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.output = ModelOutput.from_content("scripted", "done")
        return state

    return solve


@task{decorator_args}
def count() -> Task:
    samples = [Sample(id=i, input=f"count {{i}}", target="done") for i in range(1, 4)]
    return Task(dataset=MemoryDataset(samples, name="count"), solver=say_done(), scorer=includes())
"""


def ct_fleet(runs: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["eval", *args, *FAST, *ONE_WORKER], env={**env_for(runs, **extra), "COLUMNS": "200"}, timeout=900)


def _uv() -> str:
    return subprocess.run(
        ["bash", "-c", f"source {REPO / 'bin' / 'ensure-venv'} && find_uv"], capture_output=True, text=True, check=True
    ).stdout.strip()


def assert_complete_success(proc: subprocess.CompletedProcess[str], runs: Path, stem: str, name: str) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no results" not in proc.stderr and "not a complete, successful run" not in proc.stderr
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    assert merged.stem == stem
    log = read_eval_log(str(merged))
    assert log.status == "success" and log.eval.task == name
    assert sorted(s.id for s in log.samples or []) == [1, 2, 3]


@pytest.mark.e2e
def test_a_file_task_named_with_a_slash_exits_0(tmp_path: Path):
    project = tmp_path / "org"
    project.mkdir()
    (project / "count.py").write_text(SOLVER.format(decorator_args='(name="myorg/count")'))
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, str(project / "count.py"))
    assert_complete_success(proc, runs, "myorg_count", "myorg/count")


@pytest.mark.e2e
def test_a_registered_task_from_an_installed_package_exits_0(tmp_path: Path):
    files = {
        "slashy/__init__.py": "",
        "slashy/_registry.py": "from .tasks import count  # noqa: F401\n",
        "slashy/tasks.py": SOLVER.format(decorator_args=""),
    }
    wheel = write_wheel(tmp_path / "wheels", "ct-fleet-slashy", files, "[inspect_ai]\nslashy = slashy._registry\n")
    # A venv of the test's own: the package is installed as a user's `pip install` would,
    # and local workers share the controller's venv. It starts as a copy of this one made of
    # hard links where it can (building one compiles every package: 20 s of CPU); the
    # install only adds files, so this venv is left as it was.
    venv = tmp_path / "venv"
    if subprocess.run(["cp", "-al", sys.prefix, str(venv)], capture_output=True).returncode:
        shutil.rmtree(venv, ignore_errors=True)  # another file system: no hard links
        subprocess.run(["cp", "-a", sys.prefix, str(venv)], check=True)
    subprocess.run(
        [str(REPO / "bin" / "ensure-venv")], env={**env_for(tmp_path), "CT_FLEET_VENV": str(venv)}, check=True
    )
    subprocess.run(
        [_uv(), "pip", "install", "--quiet", "--no-deps", "--python", str(venv / "bin" / "python"), str(wheel)],
        check=True,
    )
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, "slashy/count", CT_FLEET_VENV=str(venv))
    assert_complete_success(proc, runs, "slashy_count", "slashy/count")
    assert not list(Path(sys.prefix).glob("lib/python*/site-packages/slashy"))  # not in this venv
