"""Whatever a task is called, the exit status comes from what its merged run holds.

A task's name is not its merged file's stem: `inspect_evals/foo` is written as
`inspect_evals_foo.eval`. A run of a registered task from a package given with -r (a wheel
built here, never installed in the venv) and of a file task whose name has a slash must
exit 0 when every sample succeeded, not report the task as without results. The package's
task keeps Inspect's registry name `package/task` on the controller's probe and on every
worker, and its merged log records the package's version, as a direct `inspect eval` of
the installed package does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.log import EvalLog, read_eval_log

from testkit.fleet import FAST, ONE_WORKER, env_for, fleet_dir, run_cli
from testkit.wheelmaker import write_wheel

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


def assert_complete_success(proc: subprocess.CompletedProcess[str], runs: Path, stem: str, name: str) -> EvalLog:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no results" not in proc.stderr and "not a complete, successful run" not in proc.stderr
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    assert merged.stem == stem
    log = read_eval_log(str(merged))
    assert log.status == "success" and log.eval.task == name
    assert sorted(s.id for s in log.samples or []) == [1, 2, 3]
    return log


@pytest.mark.e2e
def test_a_file_task_named_with_a_slash_exits_0(tmp_path: Path):
    project = tmp_path / "org"
    project.mkdir()
    (project / "count.py").write_text(SOLVER.format(decorator_args='(name="myorg/count")'))
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, str(project / "count.py"))
    assert_complete_success(proc, runs, "myorg_count", "myorg/count")


@pytest.mark.e2e
def test_a_registry_task_from_a_wheel_given_with_r_keeps_its_package_name(tmp_path: Path):
    files = {
        "slashy/__init__.py": "",
        "slashy/_registry.py": "from .tasks import count  # noqa: F401\n",
        "slashy/tasks.py": SOLVER.format(decorator_args=""),
    }
    wheel = write_wheel(tmp_path / "wheels", "ct-fleet-slashy", files, "[inspect_ai]\nslashy = slashy._registry\n")
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    proc = ct_fleet(runs, "slashy/count", "-r", str(wheel), CT_FLEET_CACHE_DIR=str(cache))
    log = assert_complete_success(proc, runs, "slashy_count", "slashy/count")
    # Inspect's names and record, as for an installed package: the solver's registry name
    # comes from the worker's import of the package, the version from its dist-info there.
    assert [step.solver for step in log.plan.steps] == ["slashy/say_done"]
    assert log.eval.packages["ct-fleet-slashy"] == "0.1.0"
    # One install on this machine: the probe's, in a site-packages directory, which every
    # local instance links instead of installing the package again.
    (site,) = [p for p in (cache / "overlays").iterdir() if not p.name.startswith(".")]
    assert (site / "site-packages" / "slashy" / "tasks.py").is_file()
    links = list((fleet_dir(runs) / "instances").glob("*/opt/linuxbench-site/site-packages"))
    assert links and all(link.is_symlink() and link.resolve() == (site / "site-packages").resolve() for link in links)
    assert not list(Path(sys.prefix).glob("lib/python*/site-packages/slashy"))  # not in this venv
    # `run-job` reruns a job here as a worker would: with the same install.
    manifest = json.loads((fleet_dir(runs) / "manifest.json").read_text())
    job_id = manifest["jobs"][0]["job_id"]
    again = run_cli(["run-job", manifest["fleet_id"], job_id], env=env_for(runs, CT_FLEET_CACHE_DIR=str(cache)))
    assert again.returncode == 0, again.stdout + again.stderr
    rerun = read_eval_log(str(fleet_dir(runs) / "rerun" / f"{job_id}.eval"))
    assert rerun.eval.task == "slashy/count" and rerun.eval.packages["ct-fleet-slashy"] == "0.1.0"
    assert [p.name for p in (cache / "overlays").iterdir() if not p.name.startswith(".")] == [site.name]
