"""Fault injection on the embedded cloud, worker side: killed workers, poison jobs, retried
infrastructure errors, spot interruptions. Each test asserts that every job ends exactly
once in the merged run or in the dead-letter report, and that nothing is left running."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import psutil
import pytest
from inspect_ai.log import read_eval_log

from fleet_helpers import (
    FAST,
    LOCAL,
    SandboxWatch,
    assert_nothing_running,
    docker_lines,
    finish,
    fleet_dir,
    merged_pairs,
    processes_in,
    running_jobs,
    start,
    stat,
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
        "3",
        "--policy",
        "tests.fault_policies:slow",
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
        victim.send_signal(signal.SIGKILL)
        kills += 1
        wait_for(lambda v=victim: gone(v), timeout=60)
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert kills >= 2
    pairs = merged_pairs(runs)
    assert len(pairs) == 12 and len(set(pairs)) == 12
    assert stat(out, "redeliveries") >= 1
    assert_nothing_running(runs)


@pytest.mark.faults
def test_poison_job_lands_in_the_dlq_report(tmp_path: Path):
    runs = tmp_path / "runs"
    proc = start(
        runs,
        "--task-file",
        "smoke",
        "--policy",
        "tests.fault_policies:crash_always",
        "--ec2-arg",
        "max_receive_count=2",
        "--ec2-arg",
        "visibility_timeout=5",
        "--ec2-arg",
        "heartbeat_interval=2",
        *FAST,
        *LOCAL,
        CT_FAULT_CRASH="web:fix_login",
    )
    code, out, err = finish(proc)
    assert code == 1, out + err
    assert "jobs without a result" in out and "dead-lettered" in out and "web:fix_login" in out and "infra" in out
    job_id = re.search(r"bin/ct-fleet run-job (\w+) (\w+)", out)
    assert job_id and job_id.group(1) == fleet_dir(runs).name
    pairs = merged_pairs(runs)
    assert sorted(pairs) == sorted(
        {
            ("web:fix_login:add_backdoor", 1),
            ("pipeline:dedupe_rows:exfil_credentials", 1),
            ("ops:enable_tls:open_ssh", 1),
        }
    )
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    assert read_eval_log(str(merged), header_only=True).status == "error"  # one sample missing
    assert_nothing_running(runs)


@pytest.mark.faults
def test_infra_errors_are_retried(tmp_path: Path):
    runs = tmp_path / "runs"
    proc = start(
        runs,
        "--task-file",
        "smoke",
        "--policy",
        "tests.fault_policies:crash_once",
        "--ec2-arg",
        "visibility_timeout=5",
        "--ec2-arg",
        "heartbeat_interval=2",
        *FAST,
        *LOCAL,
        CT_FAULT_CRASH="*",
    )
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert len(list((runs / "faults").glob("*.crashed"))) == 4  # every job crashed once
    assert len(set(merged_pairs(runs))) == 4
    assert stat(out, "redeliveries") >= 4
    assert_nothing_running(runs)


@pytest.mark.faults
def test_spot_notice_releases_jobs_at_once(tmp_path: Path):
    runs = tmp_path / "runs"
    # A long visibility timeout: only an immediate release lets the run finish in time.
    proc = start(
        runs,
        "--task-file",
        "smoke",
        "--epochs",
        "2",
        "--policy",
        "tests.fault_policies:slow",
        "--ec2-arg",
        "max_workers=1",
        "--ec2-arg",
        "visibility_timeout=600",
        *FAST,
        *LOCAL,
        CT_FAULT_SLEEP="3",
    )
    wait_for(lambda: running_jobs(runs))
    (first,) = [p for p in (fleet_dir(runs) / "instances").iterdir() if p.is_dir()]
    (first / "spot-interruption-notice").touch()
    code, out, err = finish(proc, timeout=300)
    assert code == 0, out + err
    assert "spot interruption notice" in (first / "var" / "log" / "linuxbench-bootstrap.log").read_text()
    assert len(set(merged_pairs(runs))) == 8
    assert len([p for p in (fleet_dir(runs) / "instances").iterdir() if p.is_dir()]) >= 2  # replaced
    assert_nothing_running(runs)


@pytest.mark.faults
def test_a_job_killed_mid_sample_leaves_no_sandbox(tmp_path: Path, docker_images: list[str]):
    """Docker sandboxes: kill a job's process while its container runs; the worker removes
    the container (Inspect never got to), the retry runs in a fresh one, nothing is left."""
    runs = tmp_path / "runs"
    with SandboxWatch(every=0.3) as watch:
        proc = start(
            runs,
            "--task-file",
            "smoke",
            "--policy",
            "tests.fault_policies:slow",
            *("--ec2-arg", "visibility_timeout=6", "--ec2-arg", "heartbeat_interval=2"),
            *("--ec2-arg", "max_workers=1", "--ec2-arg", "concurrency_per_worker=1"),
            *FAST,
            CT_FAULT_SLEEP="5",
        )
        fleet_id = wait_for(lambda: next((m.parent.name for m in runs.glob("*/manifest.json")), None))

        def running_job() -> str | None:
            jobs = docker_lines(
                "ps", "--filter", f"label=ct-fleet.fleet={fleet_id}", "--format", '{{.Label "ct-fleet.job"}}'
            )
            return jobs[0] if jobs else None

        job_id = wait_for(running_job, timeout=200, every=0.2)
        # One job at a time: the job process running now is the one whose container runs.
        (victim,) = running_jobs(runs)
        victim.send_signal(signal.SIGKILL)
        code, out, err = finish(proc)
    assert code == 0, out + err
    assert sorted({sid for sid, _ in merged_pairs(runs)}) == sorted(
        [
            "web:fix_login",
            "web:fix_login:add_backdoor",
            "pipeline:dedupe_rows:exfil_credentials",
            "ops:enable_tls:open_ssh",
        ]
    )
    assert stat(out, "redeliveries") >= 1
    logs = " ".join(p.read_text() for p in fleet_dir(runs).glob("instances/*/var/log/linuxbench-bootstrap.log"))
    assert f"job {job_id}: removed its leftover sandboxes" in logs
    assert len(watch.seen[fleet_id]) >= 5  # four jobs, one of them twice
    assert watch.leftovers(fleet_id) == {}
    assert_nothing_running(runs)
