"""TASK as Inspect reads it, before anything ships: a directory or glob is the task files
`inspect eval` would run (found by Inspect's own walk); each task of a file is loaded by the
name it is registered under, runs with the model it names for itself, and runs its own epochs
unless --epochs overrides them. The fleet run of a directory is in
tests/dropin/test_plain_tasks.py (its rerun names the task's directory).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ct_fleet.controller.planning import FleetRequest, plan_fleet, sizes
from ct_fleet.controller.planning.tasks import task_files
from ct_fleet.errors import BadInput
from ct_fleet.inspect_private import load_tasks, task_file
from ct_fleet.protocol import Manifest, ManifestJob, ManifestTask


@pytest.fixture(autouse=True)
def _forget_task_modules(tmp_path: Path):
    """Inspect's loader imports the task files here and what they import (sub/b.py's
    `helper`): left in sys.modules, a later probe forked from this process would find
    this `helper` instead of its own."""
    yield
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _task(*names: str, imports: str = "") -> str:
    body = "".join(f"\n\n@task\ndef {name}():\n    return Task(dataset=[Sample(input='x')])\n" for name in names)
    return f"from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n{imports}{body}"


@pytest.fixture
def evals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """evals/ with two task files Inspect runs, and files it leaves out by its rules."""
    root = tmp_path / "evals"
    files = {
        "a.py": _task("alpha", "beta"),
        "sub/b.py": _task("gamma", imports="from helper import VALUE  # beside b.py, as Inspect imports it\n"),
        "sub/helper.py": "VALUE = 1\n",  # no @task
        "syntax.py": "from inspect_ai import task\n@task\ndef broken(:\n",  # unparsable: Inspect skips it
        "_private.py": _task("private"),
        ".hidden/h.py": _task("hidden"),
        "tests/t.py": _task("tested"),
        "venv/v.py": _task("vendored"),
        "docs/notes.txt": "@task\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return root


def test_a_directory_is_the_files_whose_tasks_inspect_loads(evals: Path):
    got = task_files("evals")
    assert got == [evals / "a.py", evals / "sub" / "b.py"]
    # What Inspect's own loader runs for the same TASK: the same files, in the same order.
    loaded = [Path(task_file(t, relative=False) or "") for t in load_tasks(["evals"])]
    assert list(dict.fromkeys(loaded)) == got
    assert task_files(str(evals)) == got  # absolute, which Inspect's glob cannot take
    assert task_files("evals/") == task_files("./evals") == got
    # tests/ is left out below the directory given, not when it is the one given (Inspect's rule)
    assert task_files("evals/tests") == [evals / "tests" / "t.py"]


def test_a_glob_is_the_task_files_it_matches(evals: Path):
    assert task_files("evals/*.py") == [evals / "a.py"]
    assert task_files("evals/**/b.py") == [evals / "sub" / "b.py"]


@pytest.mark.parametrize("task", ["evals/a.py", "evals/a.py@alpha", "inspect_evals/gsm8k", "evals/nothere.py"])
def test_a_file_or_a_name_is_not_expanded(evals: Path, task: str):
    assert task_files(task) is None


@pytest.mark.parametrize("task", ["evals/docs", "evals/sub/helper*", "evals/none*"])
def test_a_directory_or_glob_without_a_task_file_is_refused(evals: Path, task: str):
    with pytest.raises(BadInput, match=r"no task file there \(Inspect looks for @task"):
        task_files(task)


def test_a_file_inspect_cannot_read_is_named(evals: Path):
    (evals / "latin1.py").write_bytes(b"# caf\xe9\n")
    with pytest.raises(BadInput, match=r"task evals: evals/latin1.py cannot be read: 'utf-8' codec"):
        task_files("evals")


def test_the_planner_refuses_it_before_anything_exists(evals: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with pytest.raises(BadInput, match="task evals/docs: no task file there"):
        plan_fleet(FleetRequest(runs_dir=runs, dotenv=tmp_path / "no.env", tasks=["evals/docs"]))
    assert list(runs.iterdir()) == []


NAMED = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample


@task
def by_function():
    return Task(name="shown_name", dataset=[Sample(input="x")])


@task(name="by_decorator")
def second():
    return Task(dataset=[Sample(input="y")])
"""


def test_each_task_of_a_file_is_loaded_by_the_name_it_is_registered_under(tmp_path: Path, monkeypatch):
    """Task(name=...) names a task in its log, but Inspect's loader finds it by its @task
    name: a job given `file.py@shown_name` failed on every worker."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "named.py").write_text(NAMED)
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    plan = plan_fleet(FleetRequest(runs_dir=runs, dotenv=tmp_path / "no.env", tasks=["proj"], models=["mockllm/model"]))
    got = sorted((t.name, t.task_spec) for t in plan.spec.tasks)
    assert got == [("by_decorator", "proj/named.py@by_decorator"), ("shown_name", "proj/named.py@by_function")]
    assert [t.name for t in load_tasks(["proj/named.py@by_function"])] == ["shown_name"]
    with pytest.raises(Exception, match="shown_name"):
        load_tasks(["proj/named.py@shown_name"])


PINNED = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample


@task
def pinned():
    return Task(dataset=[Sample(input="x")], model="none")


@task
def free():
    return Task(dataset=[Sample(input="y")])
"""


def test_a_task_that_names_its_own_model_runs_with_it_once(tmp_path: Path, monkeypatch):
    """Inspect runs a task with the model it names for itself, whatever --model says, and its
    log names that model: the fleet plans its jobs so (before, each result read as another
    model's and was rerun until the fleet gave up on it)."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "tasks.py").write_text(PINNED)
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    models = ["mockllm/model", "mockllm/other"]
    plan = plan_fleet(FleetRequest(runs_dir=runs, dotenv=tmp_path / "no.env", tasks=["proj"], models=models))
    got = sorted((t.name, t.model) for t in plan.spec.manifest().tasks)
    assert got == [("free", "mockllm/model"), ("free", "mockllm/other"), ("pinned", "none/none")]
    (task,) = load_tasks(["proj/tasks.py@pinned"])
    assert str(task.model) == "none/none"  # what Inspect runs it with, and its log says
    assert len(plan.spec.jobs) == 3


EPOCHS = """
from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import Sample


@task
def two():
    return Task(dataset=[Sample(input="x")], epochs=2)


@task
def three():
    return Task(dataset=[Sample(input="y")], epochs=Epochs(3, "max"))


@task
def plain():
    return Task(dataset=[Sample(input="z")])
"""


def _jobs_per_task(plan) -> dict[str, list[int]]:
    manifest = plan.spec.manifest()
    names = {t.key: t.name for t in manifest.tasks}
    got: dict[str, list[int]] = {}
    for job in manifest.jobs:
        got.setdefault(names[job.task], []).append(job.epoch)
    return {name: sorted(epochs) for name, epochs in got.items()}


def test_tasks_of_their_own_epochs_run_them_unless_epochs_is_given(tmp_path: Path, monkeypatch):
    """Inspect runs each task its own epochs (1 where it names none); --epochs overrides them
    all. Before, tasks of different epochs in one fleet all ran one."""
    from ct_fleet.protocol import Manifest

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "tasks.py").write_text(EPOCHS)
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()

    def plan(**extra):
        return plan_fleet(FleetRequest(runs_dir=runs, dotenv=tmp_path / "no.env", tasks=["proj"], **extra))

    own = plan()
    assert _jobs_per_task(own) == {"two": [1, 2], "three": [1, 2, 3], "plain": [1]}
    assert [t.epochs for t in load_tasks(["proj"])] == [2, 3, None]  # Inspect's own reading of the file
    manifest = own.spec.manifest()
    assert Manifest.from_json(manifest.to_json()).tasks == manifest.tasks  # read back by the merge
    given = plan(epochs=2)
    assert _jobs_per_task(given) == {"two": [1, 2], "three": [1, 2], "plain": [1, 2]}
    assert given.spec.fleet_id != own.spec.fleet_id


def test_the_manifest_size_counts_each_tasks_own_epochs():
    """The manifest's size is estimated (erring large) before anything exists: a task of
    many samples and one epoch beside a task of one sample and fifty costs its own one
    epoch, not the fleet's fifty, so such a run is not refused as too large."""
    many = ManifestTask(
        key="k1", name="many", task_spec="t.py@many", task_args={}, sample_ids=list(range(2000)), epochs=1
    )
    once = ManifestTask(key="k2", name="once", task_spec="t.py@once", task_args={}, sample_ids=["x"], epochs=50)
    manifest = Manifest(fleet_id="f0", model="mockllm/model", epochs=50, code_sha="x", tasks=[many, once], jobs=[])
    manifest.jobs = [
        ManifestJob(job_id=f"{n:016x}", task=task.key, sample_id=sample, epoch=epoch)
        for n, (task, sample, epoch) in enumerate(
            (t, s, e) for t in (many, once) for s in t.sample_ids for e in range(1, manifest.epochs_of(t) + 1)
        )
    ]
    real = len(manifest.to_json().encode())
    assert real <= sizes.manifest_bytes(manifest) <= 3 * real


SOURCE = """
from inspect_ai import Task, TaskSource, task, task_source
from inspect_ai.dataset import Sample


def one(n):
    return Task(dataset=[Sample(id=1, input="q")], name=f"round{n}")


@task_source
def rounds():
    return TaskSource.from_tasks([one(1)])


@task
def plain():
    return one(0)
"""


def test_a_task_source_is_refused_in_one_line_and_the_files_tasks_still_run(tmp_path: Path, monkeypatch):
    """A @task_source makes tasks from results while its run goes (Inspect's eval_set refuses it
    too): named, it is refused with what to do; its file's @task tasks plan as Inspect loads them."""
    from inspect_ai import TaskSource

    from ct_fleet.controller.planning import from_eval_args

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "src.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()

    def plan(task: str):
        return plan_fleet(FleetRequest(runs_dir=runs, dotenv=tmp_path / "no.env", tasks=[task], models=["none"]))

    with pytest.raises(BadInput, match=r"^task proj/src.py@rounds is a task source \(@task_source\): .* inspect eval"):
        plan("proj/src.py@rounds")
    assert [t.name for t in plan("proj/src.py").spec.tasks] == [t.name for t in load_tasks(["proj/src.py"])]
    assert [t.name for t in plan("proj/src.py").spec.tasks] == ["round0"]
    with pytest.raises(BadInput, match="run_fleet: a TaskSource is a task source"):
        from_eval_args([TaskSource.from_tasks([])], None)
    assert list(runs.iterdir()) == []  # refused before anything exists
