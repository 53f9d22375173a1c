"""Fault injection on the embedded cloud, worker side: killed workers, spot interruptions, a
job killed mid-sample (poison jobs and retried infrastructure errors, which only read a
run's outcome, share one run in test_faults_drill.py). Each test asserts that every job
ends exactly once in the merged run, and that nothing is left running."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil
import pytest

from testkit.fleet import (
    FAST,
    LOCAL,
    SandboxWatch,
    assert_nothing_running,
    finish,
    fleet_dir,
    kill,
    merged_pairs,
    processes_in,
    running_jobs,
    sandboxes_of,
    start,
    stat,
    text_of,
    wait_for,
)


def worker_with_a_job(runs: Path) -> psutil.Process | None:
    """A live worker job loop under runs/ with a job of its own running."""
    jobs = {p.pid for p in running_jobs(runs)}
    for worker in processes_in(runs, "ct_fleet.worker"):
        try:
            if not gone(worker) and any(c.pid in jobs for c in worker.children(recursive=True)):
                return worker
        except psutil.Error:
            continue
    return None


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.faults
def test_workers_killed_mid_job_lose_nothing(tmp_path: Path):
    runs = tmp_path / "runs"
    proc = start(
        runs,
        "--task-file",
        "smoke",
        "--epochs",
        "2",
        "--policy",
        "tests.testkit.fault_policies:slow",
        "--ec2-arg",
        "visibility_timeout=6",
        "--ec2-arg",
        "heartbeat_interval=3",
        "--ec2-arg",
        "max_replacements=10",
        *FAST,
        *LOCAL,
        CT_FAULT_SLEEP="2",
    )
    kills = 0
    for _ in range(3):
        # Kill a worker (its job loop) while a job of it is running: one that runs a job now,
        # not one whose killed predecessor's job has yet to go.
        victim = wait_for(lambda: proc.poll() is not None or worker_with_a_job(runs), timeout=300)
        if victim is True:
            break  # the run is over
        kill(victim)
        kills += 1
        wait_for(lambda v=victim: gone(v), timeout=60)
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert kills >= 2
    pairs = merged_pairs(runs)
    assert len(pairs) == 8 and len(set(pairs)) == 8
    assert stat(out, "redeliveries") >= 1
    assert_nothing_running(runs)


@pytest.mark.faults
def test_spot_notice_releases_jobs_at_once(tmp_path: Path):
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    # A long visibility timeout: only an immediate release lets the run finish in time.
    # Jobs wait at a gate until the worker has seen the notice: it holds jobs when it does.
    proc = start(
        runs,
        "--task-file",
        "smoke",
        "--policy",
        "tests.testkit.fault_policies:gated",
        "--ec2-arg",
        "max_workers=1",
        "--ec2-arg",
        "visibility_timeout=600",
        *FAST,
        *LOCAL,
        CT_FAULT_GATE=str(gate),
    )
    wait_for(lambda: running_jobs(runs), timeout=300)
    (first,) = [p for p in (fleet_dir(runs) / "instances").iterdir() if p.is_dir()]
    (first / "spot-interruption-notice").touch()
    log = first / "var" / "log" / "linuxbench-bootstrap.log"
    wait_for(lambda: "spot interruption notice" in text_of(log), timeout=120)
    gate.touch()
    code, out, err = finish(proc, timeout=300)
    assert code == 0, out + err
    assert "spot interruption notice" in log.read_text()
    assert len(merged_pairs(runs)) == len(set(merged_pairs(runs))) == 4
    assert len([p for p in (fleet_dir(runs) / "instances").iterdir() if p.is_dir()]) >= 2  # replaced
    # The run report marks the notice on that worker, and the worker launched after it.
    workers = {w["instance_id"]: w for w in json.loads((fleet_dir(runs) / "report.json").read_text())["workers"]}
    assert workers[first.name]["spot_notice"] is not None
    assert [w["why"] for w in workers.values()].count("first") < len(workers)
    assert "spot notice" in (fleet_dir(runs) / "report.html").read_text()
    assert_nothing_running(runs)


def _alive(home: Path) -> bool:
    pid = int((home / "pid").read_text().split()[0])
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


@pytest.mark.faults
def test_a_rebalance_recommendation_drains_the_worker_after_its_replacement_runs(tmp_path: Path):
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    proc = start(
        runs,
        *("--task-file", "smoke", "--policy", "tests.testkit.fault_policies:gated"),
        *("--ec2-arg", "max_workers=1", "--ec2-arg", "visibility_timeout=600"),
        *FAST,
        *LOCAL,
        CT_FAULT_GATE=str(gate),
    )
    wait_for(lambda: running_jobs(runs), timeout=300)
    instances = fleet_dir(runs) / "instances"
    (first,) = [p for p in instances.iterdir() if p.is_dir()]
    (first / "rebalance-recommendation").touch()  # what the loopback metadata endpoint serves
    log = first / "var" / "log" / "linuxbench-bootstrap.log"
    wait_for(lambda: "rebalance recommendation: taking no new jobs" in text_of(log), timeout=120)
    # The replacement boots while the recommended worker still holds its (gated) jobs.
    second = wait_for(
        lambda: next((p for p in instances.iterdir() if p.is_dir() and p != first and (p / "pid").exists()), None),
        timeout=120,
    )
    wait_for(lambda: "step run-worker: start" in text_of(second / "var/log/linuxbench-bootstrap.log"), 180)
    assert _alive(first), "the recommended worker left before its replacement ran"
    gate.touch()
    code, out, err = finish(proc, timeout=300)
    assert code == 0, out + err
    assert "rebalance: launching its replacement" in out + err
    assert "drained after a rebalance recommendation: exiting" in log.read_text()
    pairs = merged_pairs(runs)
    assert len(pairs) == 4 and len(set(pairs)) == 4
    workers = {w["instance_id"]: w for w in json.loads((fleet_dir(runs) / "report.json").read_text())["workers"]}
    assert workers[first.name]["rebalance"] is not None and workers[second.name]["why"] == "rebalance"
    assert_nothing_running(runs)


@pytest.mark.faults
def test_a_killed_job_then_a_run_killed_with_its_workers_leave_no_sandbox(tmp_path: Path, docker_images: list[str]):
    """Docker sandboxes, one worker running one job at a time, every job held at a gate.
    First a job's process is killed while its container runs: the worker removes the
    container (Inspect never got to) and the job is retried in a fresh one. Then the
    controller and the worker are SIGKILLed while the next container runs: nobody is left to
    remove it. The rerun removes what the dead instance left, runs what is missing, and
    nothing is left of either run."""
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    args = [
        "--task-file",
        "smoke",
        "--policy",
        "tests.testkit.fault_policies:gated",  # every job holds on (its container up) until the gate opens
        *("--ec2-arg", "max_workers=1", "--ec2-arg", "concurrency_per_worker=1"),
        # The killed run's job comes back when its visibility lapses: the rerun waits that long.
        *("--ec2-arg", "visibility_timeout=10", "--ec2-arg", "heartbeat_interval=5"),
        *FAST,
    ]
    with SandboxWatch() as watch:
        proc = start(runs, *args, CT_FAULT_GATE=str(gate))
        fleet_id = wait_for(lambda: next((m.parent.name for m in runs.glob("*/manifest.json")), None))
        run_dir = runs / fleet_id

        def running_job() -> str | None:
            jobs = sandboxes_of(run_dir, "ct-fleet.job")
            return jobs[0] if jobs else None

        def worker_log() -> str:
            return " ".join(p.read_text() for p in run_dir.glob("instances/*/var/log/linuxbench-bootstrap.log"))

        job_id = wait_for(running_job, timeout=200, every=0.2)
        (victim,) = running_jobs(runs)  # one job at a time: the one whose container runs
        kill(victim)
        wait_for(lambda: f"job {job_id}: removed its leftover sandboxes" in worker_log(), timeout=120)
        (instance,) = set(wait_for(lambda: sandboxes_of(run_dir, "ct-fleet.instance"), timeout=200, every=0.2))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        for leftover in processes_in(runs):
            kill(leftover)
        psutil.wait_procs(processes_in(runs), timeout=30)
        assert instance in sandboxes_of(run_dir, "ct-fleet.instance"), "the container outlives its killers"
        gate.touch()
        code, out, err = finish(start(runs, *args, CT_FAULT_GATE=str(gate)))
    assert code == 0, out + err
    assert sorted({sid for sid, _ in merged_pairs(runs)}) == sorted(
        [
            "web:fix_login",
            "web:fix_login:add_backdoor",
            "pipeline:dedupe_rows:exfil_credentials",
            "ops:enable_tls:open_ssh",
        ]
    )
    assert len(set(merged_pairs(runs))) == 4
    assert instance not in sandboxes_of(run_dir, "ct-fleet.instance")
    assert len(watch.projects(run_dir)) >= 6  # four jobs, the first two twice
    assert watch.leftovers(run_dir) == {}
    assert_nothing_running(runs)
