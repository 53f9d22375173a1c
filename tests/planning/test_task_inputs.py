"""Bad tasks, models and settings: each is one line on stderr, exit 2, nothing created.

Every reference is checked against what would ship (the git archive and the --extra-src
trees) and the model against what the locked environment and the user's keys provide,
before any run directory, upload or instance exists.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from testkit.fleet import REPO, env_for, run_cli

BROKEN_TASK = """
from inspect_ai import Task, task
import nonexistent_module_xyz  # the task's own error


@task
def broken():
    return Task()
"""

GOOD_TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample


@task
def fine():
    return Task(dataset=MemoryDataset([Sample(id=1, input="x")]))
"""

SYNTAX_ERROR_TASK = """
from inspect_ai import Task, task


@task
def broken(:
    return Task()
"""


def _ids_task(ids: str) -> str:
    return f"""
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample


@task
def clash():
    return Task(dataset=MemoryDataset([Sample(id=i, input="x") for i in {ids}]))
"""


UNTRACKED = f"untracked_policy_{uuid.uuid4().hex[:8]}"

# Through the CLI: one line on stderr, exit 2, no run directory.
CLI_CASES = [
    (["no_such_task_xyz"], "task no_such_task_xyz: no such task"),
    (["{broken}"], "No module named 'nonexistent_module_xyz'"),
    (["{good}", "--model", "openai/gpt-4o-mini"], "OPENAI_API_KEY is not set"),
    (["-e", "nosuchsetting:web"], "setting 'nosuchsetting' found in no source"),
    # Found by loading the task (the probe): through the CLI, whose probe is forked from its
    # controller; in-process (pytest-xdist's worker runs a thread) it is a fresh interpreter.
    (["{good}", "--model", "groq/llama-3.1-8b"], "missing SDK: Groq API requires optional dependencies"),
    (["{good}", "--model", "openai-api/acme/m1"], "ACME_API_KEY is not set"),
    (["{good}", "--model", "nowhere/x"], "unknown provider 'nowhere'"),
    (["{good}", "--model", "openai/gpt-4o-mini", "-M", "api_key=sk-x"], "never goes on the command line"),
    (["{good}", "--ec2-arg", "forward_env=CT_TEST_UNSET_VAR"], "CT_TEST_UNSET_VAR is not set"),
    (["{good}", "--sample-id", "nope"], "No matches in dataset"),
]

# The checks made before the task is loaded, in-process (plan_fleet raises BadInput before
# anything exists): faster.
PLAN_CASES = [
    ({"tasks": ["{missing}"]}, "no such file"),
    ({"tasks": ["{good}"], "policy": "honest"}, "--policy applies to settings"),
    ({"tasks": ["{good}"], "limit": "2", "sample_ids": ["1"]}, "either --limit or --sample-id"),
    ({"tasks": ["{good}"], "limit": "0"}, "--limit 0: write a count"),
    ({"envs": ["web"], "task_args": ["x=1"]}, "toyarena has no task argument x"),
    ({"task_file": "smoke", "policy": f"tests.{UNTRACKED}:pol"}, "neither tracked in this repo"),
    ({"envs": ["os:path"]}, "setting 'os' found in no source"),  # importable, but not a setting
    ({"envs": ["toyarena:web", "toyarena:nowhere"]}, "unknown env 'nowhere'"),
    ({"envs": ["web"], "ec2_args": ["setting_requirements=/no/such.whl"]}, "no such wheel file"),
    # Once accepted silently, or a crash:
    ({"tasks": ["{good}@"]}, "no task name after @; write"),
    ({"tasks": ["{good}"], "sample_ids": [",,,"]}, "--sample-id ',,,': no sample ids in it"),
    ({"tasks": ["{good}"], "environ": {"CT_FLEET_EC2": "banana"}}, "CT_FLEET_EC2=banana: expected true or false"),
    (
        {"tasks": ["{good}"], "environ": {"CT_FLEET_EMBEDDED_IDLE": "0"}},
        "CT_FLEET_EMBEDDED_IDLE=0: expected a whole number",
    ),
    ({"tasks": ["{good}"], "ec2_args": ["job_memory_mb=-1"]}, "job_memory_mb=-1: must be at least 0"),
    ({"tasks": ["{good}"], "ec2_args": ["forward_env=PATH"]}, "PATH is a system variable of the worker's own"),
    ({"tasks": ["{good}"], "ec2_args": ["forward_env=MY_KEY,LD_PRELOAD"]}, "LD_PRELOAD is a system variable"),
    ({"tasks": ["{good}"], "ec2_args": ["forward_env=A B"]}, "A B is not a variable name"),
    (
        {"tasks": ["{good}"], "ec2_args": ["max_workers=2", "max_workers=3"]},
        "--ec2-arg max_workers is given twice (max_workers=2 and max_workers=3): keep one",
    ),
    ({"envs": ["web"], "ec2_args": ["setting_requirements=*"]}, "setting requirement *: not a pip requirement"),
    ({"envs": ["web"], "ec2_args": ["setting_requirements=foo$(id)"]}, "foo$(id): not a pip requirement"),
    ({"envs": ["web"], "ec2_args": ['setting_requirements=foo;os_name=="nt"']}, "no URLs or markers"),
    ({"tasks": ["{dir}"]}, "fifo.py is not a regular file"),  # a directory holding it: never read
    ({"tasks": ["{fifo}"]}, "is not a regular file"),
    ({"tasks": ["{syntax}"]}, "SyntaxError: invalid syntax (syntax.py, line 6)"),
    ({"tasks": ["{type_clash}"]}, "sample id 1 is in clash's dataset as 1 and as '1'"),
    ({"tasks": ["{same_id}"]}, "sample id 'a' is in clash's dataset twice"),
]


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Path]:
    where = tmp_path / "proj"
    where.mkdir()
    (where / "broken.py").write_text(BROKEN_TASK)
    (where / "good.py").write_text(GOOD_TASK)
    (where / "syntax.py").write_text(SYNTAX_ERROR_TASK)
    (where / "type_clash.py").write_text(_ids_task('[1, 2, "1"]'))
    (where / "same_id.py").write_text(_ids_task('["a", "b", "a"]'))
    os.mkfifo(where / "fifo.py")  # opened by a loader, it would wait for a writer forever
    names = ("missing", "broken", "good", "syntax", "type_clash", "same_id", "fifo")
    paths = {name: where / f"{'nope' if name == 'missing' else name}.py" for name in names}
    return {**paths, "dir": where}


@pytest.fixture
def untracked_module():
    path = REPO / "tests" / f"{UNTRACKED}.py"
    path.write_text("def pol(): ...\n")  # importable here, but git does not ship it
    yield path
    path.unlink()


@pytest.mark.parametrize("args,message", CLI_CASES)
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path: Path, project, args: list[str], message: str):
    runs = tmp_path / "runs"
    runs.mkdir()
    env = env_for(runs)
    for key in ("OPENAI_API_KEY", "ACME_API_KEY", "CT_TEST_UNSET_VAR", "GROQ_API_KEY"):
        env.pop(key, None)
    proc = run_cli(["eval", *[a.format(**project) for a in args]], env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(("ct-fleet:", "WARNING"))
    ]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], proc.stderr
    assert list(runs.iterdir()) == []  # no run directory: nothing archived, launched or uploaded


@pytest.mark.parametrize("fields,message", PLAN_CASES)
def test_bad_input_is_refused_before_anything_exists(
    tmp_path: Path, project, untracked_module, monkeypatch: pytest.MonkeyPatch, fields: dict, message: str
):
    from ct_fleet.controller.planning import FleetRequest, plan_fleet
    from ct_fleet.errors import BadInput

    for key in ("OPENAI_API_KEY", "ACME_API_KEY", "CT_TEST_UNSET_VAR", "GROQ_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    fields = {
        k: v.format(**project) if isinstance(v, str) else [x.format(**project) for x in v] if isinstance(v, list) else v
        for k, v in fields.items()
    }
    runs = tmp_path / "runs"
    runs.mkdir()
    with pytest.raises(BadInput) as raised:
        plan_fleet(FleetRequest(runs_dir=runs, dotenv=tmp_path / "no.env", **fields))
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert list(runs.iterdir()) == []
