"""The probe's process: forked from the controller on Linux, a fresh interpreter elsewhere;
either way the task sees the same working directory, import path and environment, its
prints stay out of the controller's output, and a load that hangs is cut off."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from ct_fleet.controller.planning import probe_process
from ct_fleet.controller.planning.probe_process import FORKS, ProbeTimeout, run_probe

TASK = """\
import json, os, sys
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
import helper  # from an import root, as on a worker

print("the task prints at import", flush=True)
seen = {"cwd": os.getcwd(), "path0": sys.path[0], "marker": os.environ.get("PROBE_MARKER"),
        "leaked": os.environ.get("CONTROLLER_ONLY"), "helper": helper.NAME, "argv0": sys.argv[0].endswith("probe.py")}

@task
def shown():
    return Task(dataset=[Sample(id=json.dumps(seen, sort_keys=True), input="x")])
"""


LINUX = pytest.mark.skipif(not FORKS, reason="the probe forks on Linux only")


def _probe(
    tmp_path: Path, fork: bool, timeout: float = 120, helper: str = "NAME = 'from the root'\n"
) -> tuple[int, dict | None, str]:
    tmp_path.mkdir(exist_ok=True)
    image, roots = tmp_path / "image", tmp_path / "roots"
    image.mkdir(exist_ok=True)
    roots.mkdir(exist_ok=True)
    (image / "t.py").write_text(TASK)
    (roots / "helper.py").write_text(helper)
    answer, log_path = tmp_path / f"answer-{fork}.json", tmp_path / f"log-{fork}"
    env = {**os.environ, "PYTHONPATH": str(roots), "PROBE_MARKER": "set"}
    env.pop("CONTROLLER_ONLY", None)
    request = {"spec": "t.py@shown", "task_args": {}, "limit": None, "sample_id": None, "shuffle": None}
    with open(log_path, "wb") as log:
        status = run_probe(request, answer, cwd=image, env=env, log=log, timeout=timeout, fork=fork)
    parsed = json.loads(answer.read_text()) if answer.exists() else None
    return status, parsed, log_path.read_text()


@LINUX
def test_a_forked_probe_sees_what_a_fresh_interpreter_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONTROLLER_ONLY", "the controller's own variable")
    answers = {fork: _probe(tmp_path, fork) for fork in (True, False)}
    for status, answer, log in answers.values():
        assert status == 0 and answer is not None, log
        (task,) = answer["tasks"]
        (seen,) = [json.loads(str(i)) for i in task["sample_ids"]]
        assert seen == {
            "cwd": str(tmp_path / "image"),
            "path0": str(tmp_path / "image"),
            "marker": "set",
            "leaked": None,
            "helper": "from the root",
            "argv0": True,
        }
    assert answers[True][1] == answers[False][1]
    assert "the task prints at import" not in capfd.readouterr().out
    assert os.environ["CONTROLLER_ONLY"] == "the controller's own variable"  # the controller's is untouched


def _no_pidfd(pid: int) -> int:
    raise OSError(errno.ENOSYS, "pidfd_open refused")  # a kernel before 5.3, or a seccomp profile


@pytest.mark.parametrize("how", [pytest.param("fork", marks=LINUX), pytest.param("fork-poll", marks=LINUX), "spawn"])
def test_a_load_that_hangs_is_cut_off_and_killed(tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fork = how != "spawn"
    if how == "fork-poll":
        monkeypatch.setattr(probe_process.os, "pidfd_open", _no_pidfd)
    # A load that ends is waited for, and says how long a load takes on this machine now: the
    # hanging one gets three times that (at least 10 s) to reach the user's code before the
    # cut-off, however busy the machine (a fixed 10 s once ran out first under load).
    started = time.monotonic()
    status, answer, log = _probe(tmp_path / "answered", fork)
    assert status == 0 and answer is not None, log
    timeout = max(10.0, 3 * (time.monotonic() - started))
    pid_file = tmp_path / "pid"
    hang = f"import os, pathlib, time\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\ntime.sleep(600)\n"
    with pytest.raises(ProbeTimeout):
        _probe(tmp_path, fork, timeout=timeout, helper=hang)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
