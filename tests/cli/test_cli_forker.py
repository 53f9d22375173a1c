"""tests/testkit/cli_forker.py: a forked run is the process bin/ct-fleet would start, or it is not
forked at all. Most fleet tests run their controllers through it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testkit.cli_forker import FORKER, ForkedRun
from testkit.fleet import REPO, env_for


def test_a_forked_run_takes_its_own_working_directory_environment_and_exit_status(tmp_path: Path):
    (tmp_path / "mine.yml").write_text("tasks: [\n")  # only this directory has it: a relative path
    env = env_for(tmp_path / "runs", COLUMNS="200")
    run = FORKER.popen(["eval", "--task-file", "mine.yml"], env=env, cwd=tmp_path)
    assert isinstance(run, ForkedRun)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 2, out + err
    assert "mine.yml:2: not valid YAML" in err, err  # else: "unknown task set", from another cwd
    assert not (tmp_path / "runs").exists()


def test_python_start_up_settings_are_not_forked_but_run_as_bin_ct_fleet(tmp_path: Path):
    env = {**env_for(tmp_path / "runs"), "PYTHONPATH": str(tmp_path)}
    run = FORKER.popen(["--version"], env=env, cwd=REPO)
    assert isinstance(run, subprocess.Popen)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, out + err
