"""Fault injection on the embedded cloud, where processes can really be killed.

Every test asserts that each job ends exactly once in the merged run or in the dead-letter
report, and that nothing is left running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from inspect_ai.log import read_eval_log

REPO = Path(__file__).resolve().parents[1]
FAST = ["--ec2-arg", "idle_timeout=3", "--ec2-arg", "retry_backoff=1"]


def env_for(runs: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "AWS_PROFILE")}
    env.update(CT_FLEET_RUNS=str(runs), CT_FLEET_DOTENV=str(runs / ".env"), CT_FAULT_DIR=str(runs / "faults"), **extra)
    return env


def start(runs: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(REPO / "bin" / "ct-fleet"), "eval", *args],
        cwd=REPO, env=env_for(runs, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: int = 400) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, " ".join(out.split()), err


def fleet_dir(runs: Path) -> Path:
    return next(p for p in runs.iterdir() if p.is_dir() and (p / "manifest.json").exists())


def merged_pairs(runs: Path) -> list[tuple[str, int]]:
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    return [(str(s.id), s.epoch) for s in read_eval_log(str(merged)).samples or []]


def processes_in(runs: Path, needle: str = "") -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            where = proc.cwd()
            cmd = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if str(runs) in where and needle in cmd:
            found.append(proc)
    return found


def wait_for(predicate, timeout: float = 120, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not met in time")


def assert_nothing_running(runs: Path) -> None:
    time.sleep(0.5)
    assert processes_in(runs) == []
    for pid_file in runs.glob("*/moto.pid"):
        assert not psutil.pid_exists(int(pid_file.read_text()))


def stat(out: str, name: str) -> int:
    match = re.search(rf"{name} (\d+)", out)
    assert match, out
    return int(match.group(1))


@pytest.mark.faults
def test_workers_killed_mid_job_lose_nothing(tmp_path: Path):
    runs = tmp_path / "runs"
    proc = start(
        runs, "--task-file", "smoke", "--epochs", "3", "--policy", "tests.fault_policies:slow",
        "--ec2-arg", "visibility_timeout=6", "--ec2-arg", "max_replacements=10", *FAST, CT_FAULT_SLEEP="2",
    )
    kills = 0
    for _ in range(3):
        # Kill a worker (its job loop) while a job of it is running.
        wait_for(lambda: processes_in(runs, "ct_fleet.runner"))
        victims = processes_in(runs, "ct_fleet.worker")
        if victims:
            victims[0].send_signal(signal.SIGKILL)
            kills += 1
        time.sleep(2.5)
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
        runs, "--task-file", "smoke", "--policy", "tests.fault_policies:crash_always",
        "--ec2-arg", "max_receive_count=2", "--ec2-arg", "visibility_timeout=5", *FAST, CT_FAULT_CRASH="web:fix_login",
    )
    code, out, err = finish(proc)
    assert code == 1, out + err
    assert "dead-lettered jobs" in out and "web:fix_login" in out and "infra" in out
    job_id = re.search(r"bin/ct-fleet run-job (\w+) (\w+)", out)
    assert job_id and job_id.group(1) == fleet_dir(runs).name
    pairs = merged_pairs(runs)
    assert sorted(pairs) == sorted({("web:fix_login:add_backdoor", 1), ("pipeline:dedupe_rows:exfil_credentials", 1),
                                    ("ops:enable_tls:open_ssh", 1)})
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    assert read_eval_log(str(merged), header_only=True).status == "error"  # one sample missing
    assert_nothing_running(runs)


@pytest.mark.faults
def test_infra_errors_are_retried(tmp_path: Path):
    runs = tmp_path / "runs"
    proc = start(runs, "--task-file", "smoke", "--policy", "tests.fault_policies:crash_once",
                 "--ec2-arg", "visibility_timeout=5", *FAST, CT_FAULT_CRASH="*")
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert len(list((runs / "faults").glob("*.crashed"))) == 4  # every job crashed once
    assert len(set(merged_pairs(runs))) == 4
    assert stat(out, "redeliveries") >= 4
    assert_nothing_running(runs)


@pytest.mark.faults
def test_killed_controller_is_adopted_by_a_rerun(tmp_path: Path):
    runs = tmp_path / "runs"
    args = ["--task-file", "smoke", "--epochs", "3", "--policy", "tests.fault_policies:slow", *FAST]
    first = start(runs, *args, CT_FAULT_SLEEP="1.5")
    wait_for(lambda: len(list(runs.glob("*/results/*.eval"))) >= 3, timeout=200)
    first.send_signal(signal.SIGKILL)  # bin/ct-fleet execs python: this is the controller
    first.communicate()
    assert processes_in(runs, "ct_fleet.worker"), "workers should outlive the controller"
    second = start(runs, *args, CT_FAULT_SLEEP="1.5")
    code, out, err = finish(second)
    assert code == 0, out + err
    assert "adopting the running fleet" in err
    assert stat(out, "enqueued") == 0  # nothing sent twice
    pairs = merged_pairs(runs)
    assert len(pairs) == 12 and len(set(pairs)) == 12
    assert_nothing_running(runs)


@pytest.mark.faults
def test_rerun_enqueues_only_missing_or_unreadable_results(tmp_path: Path):
    runs = tmp_path / "runs"
    args = ["--task-file", "smoke", "--epochs", "2", *FAST]
    code, out, err = finish(start(runs, *args))
    assert code == 0, out + err
    results = sorted((fleet_dir(runs) / "results").glob("*.eval"))
    assert len(results) == 8
    for path in results[:3]:
        path.unlink()
    results[3].write_bytes(results[3].read_bytes()[:200])  # a truncated result does not count
    code, out, err = finish(start(runs, *args))
    assert code == 0, out + err
    assert "8 jobs (4 already done)" in out and stat(out, "enqueued") == 4
    assert len(set(merged_pairs(runs))) == 8
    assert_nothing_running(runs)


@pytest.mark.faults
def test_spot_notice_releases_jobs_at_once(tmp_path: Path):
    runs = tmp_path / "runs"
    # A long visibility timeout: only an immediate release lets the run finish in time.
    proc = start(
        runs, "--task-file", "smoke", "--epochs", "2", "--policy", "tests.fault_policies:slow",
        "--ec2-arg", "max_workers=1", "--ec2-arg", "visibility_timeout=600", *FAST, CT_FAULT_SLEEP="3",
    )
    wait_for(lambda: processes_in(runs, "ct_fleet.runner"))
    (first,) = [p for p in (fleet_dir(runs) / "instances").iterdir() if p.is_dir()]
    (first / "spot-interruption-notice").touch()
    code, out, err = finish(proc, timeout=300)
    assert code == 0, out + err
    assert "spot interruption notice" in (first / "var" / "log" / "linuxbench-bootstrap.log").read_text()
    assert len(set(merged_pairs(runs))) == 8
    assert len([p for p in (fleet_dir(runs) / "instances").iterdir() if p.is_dir()]) >= 2  # replaced
    assert_nothing_running(runs)


@pytest.mark.faults
@pytest.mark.parametrize(
    "knobs,message",
    [
        (["--ec2-arg", "silent_timeout=4", "--ec2-arg", "heartbeat_interval=1000", "--ec2-arg", "stale_after=2"],
         "no progress and no word from workers"),
        (["--ec2-arg", "no_sample_timeout=5", "--ec2-arg", "heartbeat_interval=1"], "no completed sample"),
    ],
)
def test_hard_timeouts_terminate_the_fleet(tmp_path: Path, knobs: list[str], message: str):
    runs = tmp_path / "runs"
    proc = start(runs, "-e", "web", "-t", "fix_login", "--policy", "tests.fault_policies:slow",
                 "--ec2-arg", "sample_time_limit=0", *knobs, *FAST, CT_FAULT_SLEEP="60")
    code, out, err = finish(proc, timeout=200)
    assert code == 1, out + err
    assert message in err
    if "stale_after=2" in knobs:
        assert "no progress for" in err
    assert_nothing_running(runs)
