"""Fault injection on the embedded cloud, controller side: a killed controller adopted by a
rerun, hard timeouts, Ctrl-C (the resume of missing or unreadable results starts from the
shared run of test_local_run.py)."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from ct_fleet.controller.planning.probe_process import FORKED_NAME, PROBE_MODULE
from testkit.fleet import (
    FAST,
    LOCAL,
    ONE_WORKER,
    REPO,
    assert_nothing_running,
    cmdline_of,
    env_for,
    finish,
    fleet_dir,
    merged_pairs,
    paused_at,
    processes_in,
    read_until,
    start,
    stat,
    wait_for,
)


@pytest.mark.faults
def test_killed_controller_is_adopted_by_a_rerun(tmp_path: Path):
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    # Three jobs run, the other five wait at the gate: the fleet still has work when the
    # second controller comes, however slow the machine; the gate opens once it has adopted.
    args = [
        "--task-file",
        "smoke",
        "--epochs",
        "2",
        "--policy",
        "tests.testkit.fault_policies:gated",
        *FAST,
        *LOCAL,
        *ONE_WORKER,
    ]
    first = start(runs, *args, CT_FAULT_FREE="3", CT_FAULT_GATE=str(gate))
    wait_for(lambda: len(list(runs.glob("*/jobs/*.evaljob"))) >= 2, timeout=300)
    first.send_signal(signal.SIGKILL)  # bin/ct-fleet execs python: this is the controller
    first.communicate()
    assert processes_in(runs, "ct_fleet.worker"), "workers should outlive the controller"
    second = start(runs, *args, CT_FAULT_GATE=str(gate), CT_FLEET_PAUSE_AT="tracking")
    marker = paused_at(runs, "tracking")
    gate.touch()
    marker.unlink()
    code, out, err = finish(second)
    assert code == 0, out + err
    assert "adopting the running fleet" in err
    assert stat(out, "enqueued") == 0  # nothing sent twice
    pairs = merged_pairs(runs)
    assert len(pairs) == 8 and len(set(pairs)) == 8
    assert_nothing_running(runs)


@pytest.mark.faults
@pytest.mark.parametrize(
    "knobs,message",
    [
        (
            [
                "--ec2-arg",
                "silent_timeout=4",
                "--ec2-arg",
                "heartbeat_interval=1000",
                "--ec2-arg",
                "visibility_timeout=2000",
                "--ec2-arg",
                "stale_after=2",
            ],
            "no progress and no word from workers",
        ),
        (["--ec2-arg", "no_sample_timeout=5", "--ec2-arg", "heartbeat_interval=1"], "no completed sample"),
    ],
)
def test_hard_timeouts_terminate_the_fleet(tmp_path: Path, knobs: list[str], message: str):
    runs = tmp_path / "runs"
    proc = start(
        runs,
        "-e",
        "web",
        "-t",
        "fix_login",
        "--policy",
        "tests.testkit.fault_policies:slow",
        "--ec2-arg",
        "sample_time_limit=0",
        *knobs,
        *FAST,
        *LOCAL,
        CT_FAULT_SLEEP="60",
    )
    code, out, err = finish(proc, timeout=200)
    assert code == 1, out + err
    assert message in err
    if "stale_after=2" in knobs:
        assert "no progress for" in err
    assert_nothing_running(runs)


def _results_put(run_dir: Path) -> set[str]:
    """Job ids whose result the embedded S3 accepted (its request log, runs/<fleet>/moto.log)."""
    log = run_dir / "moto.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return set(re.findall(rf'"PUT /[^/ ]+/{run_dir.name}/([0-9a-f]+)\.eval HTTP/1\.1" 200', text))


@pytest.mark.faults
def test_results_that_arrive_at_the_prompt_are_kept_and_a_hang_up_is_an_answer(tmp_path: Path):
    """Ctrl-C on a terminal asks whether to leave the workers running. The jobs go on while
    it waits; they must not be lost with the embedded cloud when the run stops, and a
    terminal closed at the prompt is "stop", not a crash."""
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    master, slave = pty.openpty()
    args = ["--task-file", "smoke", "--epochs", "2", "--policy", "tests.testkit.fault_policies:gated"]
    proc = subprocess.Popen(
        [str(REPO / "bin" / "ct-fleet"), "eval", *args, *FAST, *LOCAL, *ONE_WORKER],
        cwd=REPO,
        env=env_for(runs, CT_FAULT_FREE="1", CT_FAULT_GATE=str(gate)),
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,  # the prompt is on the terminal: read from its master below
        text=True,
    )
    os.close(slave)
    try:
        wait_for(lambda: list(runs.glob("*/jobs/*.evaljob")), timeout=300)
        run_dir = fleet_dir(runs)
        jobs = len(json.loads((run_dir / "manifest.json").read_text())["jobs"])
        assert jobs > 2
        proc.send_signal(signal.SIGINT)
        read_until(master, b"[stop/leave]")
        gate.touch()  # the other jobs run now, while the question waits
        wait_for(lambda: len(_results_put(run_dir)) == jobs, timeout=300)
    finally:
        os.close(master)  # the terminal goes away: the answer is "stop"
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert {p.stem for p in run_dir.glob("jobs/*.evaljob")} == _results_put(run_dir)
    assert not list(runs.glob("crashes/*")), "a closed terminal is not a bug"
    assert_nothing_running(runs)
    again = start(runs, *args, *FAST, *LOCAL, *ONE_WORKER, CT_FAULT_GATE=str(gate))
    code, out, err = finish(again)
    assert code == 0, out + err
    assert f"{jobs} jobs ({jobs} already done), 0 workers" in out


def _gated_smoke(runs: Path, gate: Path, **extra: str) -> subprocess.Popen[str]:
    """Four jobs, one free and the rest held at `gate`: the run is still going at the fault."""
    return start(
        runs,
        "--task-file",
        "smoke",
        "--policy",
        "tests.testkit.fault_policies:gated",
        *FAST,
        *LOCAL,
        *ONE_WORKER,
        CT_FAULT_FREE="1",
        CT_FAULT_GATE=str(gate),
        **extra,
    )


@pytest.mark.faults
def test_a_suspended_controller_keeps_its_embedded_cloud_a_killed_one_stops_the_run_and_a_rerun_resumes(
    tmp_path: Path,
):
    """A laptop asleep: the controller stopped, however long, is not dead, and its embedded
    cloud waits for it. Then the cloud is killed under the running controller: the run
    stops at once, and a rerun resumes it."""
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    # The cloud may outlive a dead controller by 2 s only.
    proc = _gated_smoke(runs, gate, CT_FLEET_EMBEDDED_IDLE="2")
    wait_for(lambda: len(list(runs.glob("*/jobs/*.evaljob"))) >= 1, timeout=300)
    lease, server = fleet_dir(runs) / "moto.lease", psutil.Process(int((fleet_dir(runs) / "moto.pid").read_text()))
    proc.send_signal(signal.SIGSTOP)
    try:
        # The lease idle for three times its limit: the server's watch (every 0.5 s) has looked.
        wait_for(lambda: lease.stat().st_mtime + 6 < time.time(), timeout=60)
        assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    finally:
        proc.send_signal(signal.SIGCONT)
    # Awake again, the controller goes on calling the cloud it kept (the cloud's request log).
    requests = fleet_dir(runs) / "moto.log"
    slept = requests.stat().st_size
    wait_for(lambda: requests.stat().st_size > slept, timeout=60)
    assert proc.poll() is None and server.is_running()
    server.kill()
    # At once: retries on a server that is not coming back took 95-130 s here.
    code, out, err = finish(proc, timeout=60)
    assert code == 1, out + err
    assert "the embedded cloud stopped (its moto server" in err
    assert "teardown failed" not in err and "Traceback" not in err and "could not write the run report" not in err
    assert (fleet_dir(runs) / "report.html").exists()
    assert_nothing_running(runs)
    gate.touch()
    code, out, err = finish(_gated_smoke(runs, gate))
    assert code == 0, out + err
    assert re.search(r"4 jobs \([1-4] already done", out + err), out + err
    assert sorted(merged_pairs(runs)) == sorted({*merged_pairs(runs)}) and len(merged_pairs(runs)) == 4
    assert_nothing_running(runs)


@pytest.fixture
def short_tmpdir():
    """A TMPDIR of the test's own, short enough for the warm runner's socket path."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="ctt-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


HANGING_TASK = """
import time

from inspect_ai import Task, task

time.sleep(600)  # an import that never ends: the probe is still loading at the signal


@task
def hangs():
    return Task()
"""


@pytest.mark.faults
def test_sigterm_while_the_task_is_probed_leaves_no_probe_and_no_temp_dir(tmp_path: Path, short_tmpdir: Path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "hangs.py").write_text(HANGING_TASK)
    proc = start(tmp_path / "runs", str(project / "hangs.py"), TMPDIR=str(short_tmpdir))

    def probe() -> psutil.Process | None:
        children = psutil.Process(proc.pid).children(recursive=True)
        return next((p for p in children if p.name() == FORKED_NAME or PROBE_MODULE in cmdline_of(p)), None)

    prober = wait_for(probe, timeout=120)
    assert any(short_tmpdir.glob("ct-fleet-shipped-*")), "the shipped tree is where the test looks for it"
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=60)
    assert code == 130, out + err
    assert "Traceback" not in err
    assert not prober.is_running() or prober.status() == psutil.STATUS_ZOMBIE
    assert sorted(p.name for p in short_tmpdir.iterdir()) == []


@pytest.mark.faults
def test_ctrl_c_without_a_terminal_stops_the_fleet_keeps_results_and_leaves_no_temp_dir(
    tmp_path: Path, short_tmpdir: Path
):
    """SIGINT with no terminal to ask on (SIGTERM takes the same path: test_interrupts.py)
    while one job is done and the others wait at a gate that never opens."""
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    proc = _gated_smoke(runs, gate, TMPDIR=str(short_tmpdir))
    wait_for(lambda: len(list(runs.glob("*/jobs/*.evaljob"))) >= 1, timeout=300)
    # A job held at the gate (its Inspect log directory, in the instance's work directory)
    # and the warm runner (its socket directory, in TMPDIR): they exist now.
    wait_for(lambda: [*runs.rglob(".*.inspect"), *short_tmpdir.rglob(".*.inspect")], timeout=120)
    assert list(short_tmpdir.rglob("ct-warm-*"))
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=120)
    assert code == 130, out + err
    assert "stopped; finished results are kept in" in err
    assert list(fleet_dir(runs).glob("jobs/*.evaljob"))
    assert_nothing_running(runs)
    assert sorted(p.name for p in short_tmpdir.iterdir()) == []
