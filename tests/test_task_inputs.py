"""Bad tasks, models and settings: each is one line on stderr, exit 2, nothing created.

Every reference is checked against what would ship (the git archive and the --extra-src
trees) and the model against what the locked environment and the user's keys provide,
before any run directory, upload or instance exists.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from fleet_helpers import REPO, env_for

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

UNTRACKED = f"untracked_policy_{uuid.uuid4().hex[:8]}"

CASES = [
    (["no_such_task_xyz"], "task no_such_task_xyz: no such task"),
    (["{missing}"], "no such file"),
    (["{broken}"], "No module named 'nonexistent_module_xyz'"),
    (["{good}", "--model", "groq/llama-3.1-8b"], "missing SDK: Groq API requires optional dependencies"),
    (["{good}", "--model", "openai/gpt-4o-mini"], "OPENAI_API_KEY is not set"),
    (["{good}", "--model", "openai-api/acme/m1"], "ACME_API_KEY is not set"),
    (["{good}", "--model", "nowhere/x"], "unknown provider 'nowhere'"),
    (["{good}", "--model", "openai/gpt-4o-mini", "-M", "api_key=sk-x"], "a key never goes on the command line"),
    (
        ["{good}", "--ec2-arg", "forward_env=CT_TEST_UNSET_VAR"],
        "forward_env=CT_TEST_UNSET_VAR: CT_TEST_UNSET_VAR is not set",
    ),
    (["{good}", "--policy", "honest"], "--policy applies to settings"),
    (["{good}", "--limit", "2", "--sample-id", "1"], "either --limit or --sample-id"),
    (["{good}", "--limit", "0"], "--limit 0: write a count"),
    (["-e", "web", "-T", "x=1"], "-T applies to a plain Inspect task"),
    (["--task-file", "smoke", "--policy", f"tests.{UNTRACKED}:pol"], "neither tracked in this repo"),
    (["-e", "nosuchsetting:web"], "setting 'nosuchsetting' found in no source"),
    (["-e", "os:path"], "setting 'os' found in no source"),  # importable, but not a setting
    (["-e", "toyarena:web", "-e", "toyarena:nowhere"], "unknown env 'nowhere'"),
]


@pytest.mark.parametrize("args,message", CASES)
def test_bad_task_model_or_setting_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str):
    runs = tmp_path / "runs"
    runs.mkdir()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "broken.py").write_text(BROKEN_TASK)
    (project / "good.py").write_text(GOOD_TASK)
    names = {"missing": project / "nope.py", "broken": project / "broken.py", "good": project / "good.py"}
    args = [a.format(**names) for a in args]
    untracked = REPO / "tests" / f"{UNTRACKED}.py"
    untracked.write_text("def pol(): ...\n")  # importable here, but git does not ship it
    env = env_for(runs)
    for key in ("OPENAI_API_KEY", "ACME_API_KEY", "CT_TEST_UNSET_VAR"):
        env.pop(key, None)
    try:
        proc = subprocess.run(
            [str(REPO / "bin" / "ct-fleet"), "eval", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        untracked.unlink()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(("ct-fleet:", "WARNING"))
    ]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], proc.stderr
    assert list(runs.iterdir()) == []  # no run directory: nothing archived, launched or uploaded
