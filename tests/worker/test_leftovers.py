"""Nothing a run starts outlives it: scratch directories of a controller killed with
SIGKILL are swept by the next one (named for their owner's pid); what a task starts when
the probe loads it goes with the probe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ct_fleet import tempdirs
from testkit.fleet import env_for, run_cli, wait_for


@pytest.mark.parametrize("kind", ["shipped", "merge"])
def test_a_killed_owners_scratch_directory_is_swept_by_the_next(tmp_path: Path, kind: str, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempdirs.tempfile, "tempdir", None)  # TMPDIR read again
    # A process that makes one and is killed before any cleanup can run
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal; from ct_fleet.tempdirs import owned_tempdir; "
            f"d = owned_tempdir({kind!r}); (d / 'big').write_bytes(b'x' * 1000); print(d, flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    left = Path(killed.stdout.strip())
    assert killed.returncode == -9 and left.is_dir() and left.parent == tmp_path
    mine = tempdirs.owned_tempdir(kind)  # the next run of that kind
    assert not left.exists() and mine.is_dir()
    assert tempdirs.owned_tempdir(kind).is_dir() and mine.is_dir()  # a live owner's is never swept


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_what_a_task_starts_at_import_goes_with_the_probe(tmp_path: Path) -> None:
    """The probe loads the task in a process group of its own, killed whole when it ends."""
    pid_file = tmp_path / "child.pid"
    task = tmp_path / "starts_a_child.py"
    task.write_text(
        "import pathlib, subprocess\n"
        "from inspect_ai import Task, task\n"
        "@task\ndef t():\n    return Task(dataset=[])\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "raise RuntimeError('this task does not load')\n"
    )
    runs = tmp_path / "runs"
    done = run_cli(["eval", str(task), "--model", "mockllm/model"], env=env_for(runs))
    assert done.returncode == 2 and "this task does not load" in done.stderr, done.stderr
    pid = int(pid_file.read_text())
    wait_for(lambda: _gone(pid), timeout=10)
