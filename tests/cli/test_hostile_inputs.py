"""Inputs that once crashed, hung or amplified, through `bin/ct-fleet` as a user runs it:
special files where a file is read, YAML anchors and huge numbers in -T/-M, a runs
directory that cannot be one, the read-only commands without AWS credentials.

Each must exit 2 within the subprocess timeout (a FIFO or /dev/zero read without a
bound would hang or exhaust memory), with one line on stderr naming the fix, and
create nothing: no run directory, no embedded cloud.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ct_fleet.controller.planning.preflight import check_runs_dir
from ct_fleet.errors import BadInput
from testkit.fleet import REPO, env_for, run_cli

CT_FLEET = str(REPO / "bin" / "ct-fleet")
TIMEOUT = 120  # generous for a busy machine; a blocking read never returns at all
NO_AWS = {
    "AWS_ACCESS_KEY_ID": None,
    "AWS_SECRET_ACCESS_KEY": None,
    "AWS_SESSION_TOKEN": None,
    "AWS_PROFILE": None,
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config",
    "AWS_EC2_METADATA_DISABLED": "true",
}
NOISY_TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample

print("{not json, from the task's import")


@task
def noisy():
    print("and from building it")
    return Task(dataset=MemoryDataset([Sample(id=1, input="x"), Sample(id=2, input="y")]))
"""


def _anchors(flag: str) -> list[str]:
    # 240 bytes that expand to 9**6 strings: the manifest would be 100 MB.
    levels = "[&a [x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]]"
    return [flag, f"bomb={levels}"]


@dataclass
class Case:
    name: str
    args: list[str]
    message: str
    env: dict[str, str | None] = field(default_factory=dict)
    code: int = 2


CASES = [
    Case("config /dev/zero", ["eval", "--task-file", "smoke", "--config", "/dev/zero"], "/dev/zero: is a device"),
    Case("config /dev/urandom", ["eval", "--task-file", "smoke", "--config", "/dev/urandom"], "is a device"),
    Case("config fifo", ["eval", "--task-file", "smoke", "--config", "{fifo}"], "is a FIFO (named pipe)"),
    Case(
        "dotenv /dev/zero", ["eval", "--task-file", "smoke"], "/dev/zero: is a device", {"CT_FLEET_DOTENV": "/dev/zero"}
    ),
    Case("dotenv fifo", ["eval", "--task-file", "smoke"], "is a FIFO", {"CT_FLEET_DOTENV": "{fifo}"}),
    Case("task file fifo", ["eval", "--task-file", "{fifo}"], "not a file"),
    Case(
        "-T anchors", ["eval", "--task-file", "smoke", *_anchors("-T")], "-T bomb: YAML anchors (&name) are not allowed"
    ),
    Case("-M anchors", ["eval", "--task-file", "smoke", *_anchors("-M")], "-M bomb: YAML anchors"),
    Case("-T huge number", ["eval", "--task-file", "smoke", "-T", "n=" + "7" * 120_000], "over the 32,768-byte limit"),
    Case("-T long number", ["eval", "--task-file", "smoke", "-T", "n=" + "7" * 100], "beyond 64 bits"),
    Case("runs is a file", ["eval", "--task-file", "smoke"], "is not a directory", {"CT_FLEET_RUNS": "/etc/hostname"}),
    Case("status without AWS", ["status", "0123456789ab"], "no AWS credentials: run `aws sso login", NO_AWS),
    Case("logs without AWS", ["logs", "0123456789ab"], "no AWS credentials: run `aws sso login", NO_AWS),
    Case("cloud status without AWS", ["cloud", "status"], "no AWS credentials", NO_AWS),
    Case("cloud status --clean without AWS", ["cloud", "status", "--clean"], "aws sso login", NO_AWS),
    Case(
        "status with no such profile",
        ["status", "0123456789ab"],
        "AWS profile 'nope' is not configured",
        {**NO_AWS, "AWS_PROFILE": "nope"},
    ),
]


def _run(case: Case, base: Path) -> tuple[Case, subprocess.CompletedProcess[str], Path]:
    where = base / case.name.replace(" ", "_").replace("/", "_")
    runs = where / "runs"
    runs.mkdir(parents=True)
    fifo = where / "pipe.yml"
    os.mkfifo(fifo)
    env: dict[str, str] = env_for(runs)
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value.format(fifo=fifo)
    args = [a.format(fifo=fifo) for a in case.args]
    proc = run_cli(args, env=env, timeout=TIMEOUT)
    return case, proc, runs


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    base = tmp_path_factory.mktemp("hostile")
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = list(pool.map(lambda c: _run(c, base), CASES))
    return {case.name: (proc, runs) for case, proc, runs in done}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_in_one_line_with_exit_2(case: Case, outcomes):
    proc, runs = outcomes[case.name]
    shown = f"exit {proc.returncode}\nstderr:\n{proc.stderr}\nstdout:\n{proc.stdout[-2000:]}"
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(("ct-fleet:", "WARNING"))
    ]
    assert proc.returncode == case.code, shown
    assert len(lines) == 1 and lines[0].startswith("error:") and case.message in lines[0], shown
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert list(runs.iterdir()) == [], "something was created under runs/"


def test_a_task_that_prints_at_import_is_probed_and_estimate_launches_nothing(tmp_path: Path):
    """The probe answers on its own channel; estimate=true stops the embedded cloud too."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "noisy.py").write_text(NOISY_TASK)
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = subprocess.run(
        [CT_FLEET, "eval", str(project / "noisy.py"), "--ec2-arg", "estimate=true"],
        cwd=REPO,
        env=env_for(runs),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cost estimate" in proc.stdout and "error" not in proc.stderr, proc.stdout + proc.stderr
    assert list(runs.iterdir()) == []  # nothing launched: no run directory, no moto server


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the check as another user")
def test_a_runs_directory_this_user_cannot_write_is_refused():
    """Root writes anywhere, so the check runs as nobody (uid 65534), as a user would hit it."""
    base = Path(tempfile.mkdtemp(prefix="ct-fleet-readonly-"))  # pytest's tmp_path is root's alone
    base.chmod(0o755)
    runs = base / "readonly"
    runs.mkdir(mode=0o555)
    try:
        _check_as_nobody(runs)
    finally:
        shutil.rmtree(base)


def _check_as_nobody(runs: Path) -> None:
    """check_runs_dir in a forked child that has become nobody (no exec: root's interpreter
    is not nobody's to run)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            lines = []
            for path in (runs, runs / "new", Path(tempfile.gettempdir())):
                try:
                    check_runs_dir(path, {"CT_FLEET_RUNS": str(path)})
                    lines.append("accepted")
                except BadInput as exc:
                    lines.append(str(exc))
            os.write(write, "\n".join(lines).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        got = fh.read().splitlines()
    os.waitpid(pid, 0)
    fix = "point CT_FLEET_RUNS at a directory you can write"
    assert got == [
        f"CT_FLEET_RUNS={runs} is not writable: {fix}",
        f"CT_FLEET_RUNS={runs}/new cannot be made: {runs} is not writable: {fix}",
        "accepted",
    ]
