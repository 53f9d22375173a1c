"""The warm runner: logs equal to the per-process runner's, and a job that crashes, hangs
or leaks takes down only itself (the worker and its fork server carry on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from inspect_ai.log import read_eval_log

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer
from ct_fleet.protocol import WorkMessage
from ct_fleet.services import queues, session, stop, store
from ct_fleet.worker.attempt import Attempt
from ct_fleet.worker.loop import Worker
from ct_fleet.worker.supervise import supervise
from ct_fleet.worker.warm import WarmJob, WarmRunner
from testkit.workers import worker_settings

REPO = Path(__file__).resolve().parents[2]
TASK = "examples/settings/toyarena/task.py@toyarena"
PYTHONPATH = os.pathsep.join([str(REPO / "lib"), str(REPO / "examples" / "settings"), str(REPO)])

# Fields that differ between any two runs of the same sample (times, random ids).
NOISE = {
    "created",
    "eval_id",
    "run_id",
    "task_id",
    "started_at",
    "completed_at",
    "uuid",
    "span_id",
    "parent_id",
    "timestamp",
    "working_start",
    "completed",
    "total_time",
    "working_time",
}


def job(
    policy: str = "honest", sample_id: str = "web:fix_login:add_backdoor", epoch: int = 2, **kw: Any
) -> WorkMessage:
    fields: dict[str, Any] = {
        "fleet_id": "warmtest",
        "job_id": f"{policy.rsplit(':', 1)[-1]}-{epoch}",
        "sample_id": sample_id,
        "epoch": epoch,
        "task_spec": TASK,
        "task_args": {"policy": policy, "sandbox": "local"},  # the runner, not Docker
        "model": "mockllm/model",
        "code_sha": "test",
        "result_key": f"warmtest/{policy}-{epoch}.eval",
        "time_limit": 120,
        **kw,
    }
    # The worker kills a job at its kill_after (the fleet's sample_time_limit), Inspect
    # ends it at time_limit: here both, as a fleet whose user set sample_time_limit sends.
    fields.setdefault("kill_after", fields["time_limit"])
    return WorkMessage(**fields)


def normalised(value: Any, key: str = "") -> Any:
    """The log without NOISE, and without the random ids of messages and events."""
    if isinstance(value, dict):
        keep_id = "input" in value and "epoch" in value  # a sample: its id is the sample id
        return {k: normalised(v, k) for k, v in value.items() if k not in NOISE and (k != "id" or keep_id)}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def log_content(path: Path) -> Any:
    return normalised(json.loads(read_eval_log(str(path)).model_dump_json()))


@pytest.fixture(scope="module")
def env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", PYTHONPATH)
        mp.setenv("CT_FAULT_CRASH", "*")
        mp.setenv("CT_FAULT_LEAK_MB", "3000")
        yield


def test_warm_logs_equal_the_per_process_runners(env: None, tmp_path: Path) -> None:
    the_job = job("attack")
    cold = tmp_path / "cold.eval"
    subprocess.run([sys.executable, "-m", "ct_fleet.worker.runner", the_job.to_json(), str(cold)], cwd=REPO, check=True)
    warm = WarmRunner(REPO, dict(os.environ))
    try:
        for name in ("first", "warm"):  # the second runs from a server warmed by the first
            ended = supervise(
                warm.start(the_job, tmp_path / f"{name}.eval", tmp_path / f"{name}.log", {}),
                time_limit=300,
                memory_limit_mb=None,
            )
            assert ended.code == 0, (tmp_path / f"{name}.log").read_text()
    finally:
        warm.close()
    expected = log_content(cold)
    assert expected["samples"][0]["id"] == "web:fix_login:add_backdoor" and expected["samples"][0]["epoch"] == 2
    assert expected["results"]["scores"], "a log with scores, so that they are compared too"
    for name in ("first", "warm"):
        assert log_content(tmp_path / f"{name}.eval") == expected


CONTROLLED = """
import os
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.solver import solver
from inspect_ai._control.discovery import discovery_file_path

@solver
def looks():
    async def solve(state, generate):
        # Inspect's control server publishes this file for its process while the eval runs.
        state.output.completion = f"control server: {discovery_file_path(os.getpid()).exists()}"
        return state
    return solve

@task
def controlled():
    return Task(dataset=[Sample(id="s", input="x")], solver=looks())
"""


def test_a_job_runs_without_inspects_control_server(env: None, tmp_path: Path) -> None:
    """The fleet refuses --ctl-server, and no `inspect ctl` client drives a fleet's job:
    neither runner starts one (it cost every warm runner and cold job 0.45 s of CPU)."""
    (tmp_path / "controlled.py").write_text(CONTROLLED)
    the_job = job(task_spec="controlled.py@controlled", sample_id="s", task_args={})
    environ = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    cold = tmp_path / "cold.eval"
    subprocess.run(
        [sys.executable, "-m", "ct_fleet.worker.runner", the_job.to_json(), str(cold)],
        cwd=tmp_path,
        env=environ,
        check=True,
    )
    warm = WarmRunner(tmp_path, environ)
    try:
        ended = supervise(
            warm.start(the_job, tmp_path / "warm.eval", tmp_path / "warm.log", {}), time_limit=300, memory_limit_mb=None
        )
        assert ended.code == 0, (tmp_path / "warm.log").read_text()
    finally:
        warm.close()
    for path in (cold, tmp_path / "warm.eval"):
        (sample,) = read_eval_log(str(path)).samples or []
        assert sample.output.completion == "control server: False", path.name


# -- faults: each takes down its own job only ---------------------------------------------


@pytest.fixture(scope="module")
def worker(env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    tmp = tmp_path_factory.mktemp("warm-worker")
    with MotoServer(log_path=tmp / "moto.log") as moto, pytest.MonkeyPatch.context() as mp:
        for key, value in {
            "AWS_ENDPOINT_URL": moto.endpoint_url,
            "AWS_ACCESS_KEY_ID": EMBEDDED_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": EMBEDDED_SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            mp.setenv(key, value)
        mp.delenv("AWS_PROFILE", raising=False)
        session.reset()
        queues.ensure_queues(session.client("sqs"), "warmtest", visibility_timeout=60, max_receive_count=3)
        settings = worker_settings(
            "warmtest",
            tmp / "jobs",
            instance_id="i-warmtest",
            max_concurrency=2,
            idle_timeout=1,
            heartbeat_interval=30,
            retry_backoff=1,
            job_memory_mb=600,
            kill_grace=1,
        )
        settings.work_dir.mkdir()
        w = Worker(settings)
        yield w
        assert w.warm is not None
        w.warm.close()
    session.reset()


def test_a_worker_that_gets_no_job_starts_no_warm_runner(aws_env: dict[str, str], tmp_path: Path) -> None:
    """The warm-up is seconds of CPU: a worker that finds the fleet's tail at once (a late
    replacement, the last of a scaled fleet) leaves without paying it."""
    session.reset()
    s3, sqs = session.client("s3"), session.client("sqs")
    store.ensure_bucket(s3, "warm-idle", create=True)
    queues.ensure_queues(sqs, "warmidle", visibility_timeout=60, max_receive_count=2)
    stop.mark_tail(s3, "warm-idle", "warmidle", True)
    w = Worker(worker_settings("warmidle", tmp_path / "w", bucket="warm-idle", idle_timeout=3))
    assert w.warm is not None
    others = _servers()  # another test's, in this process: not this worker's
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    started: set[int] = set()
    while thread.is_alive():
        started |= _servers() - others
        thread.join(timeout=0.02)
    assert w.left_because == "the queue's tail"
    assert started == set()


def _servers() -> set[int]:
    """This process's descendants that are warm runners' servers."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "ct_fleet.worker.forkserver" in child.cmdline():
                found.add(child.pid)
        except psutil.Error:
            continue  # gone already
    return found


def gone(pid: int, within: float = 60) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def wait_for_children(pid: int, within: float = 60) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while not (found := psutil.Process(pid).children(recursive=True)):
        assert time.monotonic() < deadline, "the job started no process of its own"
        time.sleep(0.1)
    return found


def server_pid(w: Worker) -> int:
    assert w.warm is not None and w.warm._proc is not None
    return w.warm._proc.pid


def good_job_runs(w: Worker, epoch: int) -> None:
    attempt = w.attempts.run(job("honest", epoch=epoch), w.settings.work_dir / f"good-{epoch}.eval")
    assert attempt.outcome == "success", attempt


def test_a_good_job_runs_warm(worker: Worker) -> None:
    good_job_runs(worker, 1)
    pid = server_pid(worker)
    good_job_runs(worker, 2)
    assert server_pid(worker) == pid  # one server for every job


@pytest.mark.parametrize(
    "policy,error",
    [
        ("tests.testkit.fault_policies:crash_always", "runner exit 3"),
        ("tests.testkit.fault_policies:segfault", "runner exit -11"),
    ],
)
def test_a_crashing_job_is_retried_and_nothing_else_dies(worker: Worker, policy: str, error: str) -> None:
    good_job_runs(worker, 3)
    pid = server_pid(worker)
    attempt = worker.attempts.run(job(policy), worker.settings.work_dir / "crash.eval")
    assert (attempt.outcome, attempt.error_class) == ("retry", "infra")
    assert attempt.error and error in attempt.error
    assert server_pid(worker) == pid
    good_job_runs(worker, 4)


def test_a_hung_job_is_killed_at_its_time_limit(worker: Worker) -> None:
    good_job_runs(worker, 5)
    pid = server_pid(worker)
    attempt = worker.attempts.run(
        job("tests.testkit.fault_policies:hang", time_limit=1), worker.settings.work_dir / "hang.eval"
    )
    assert (attempt.outcome, attempt.error_class) == ("failed", "timeout")
    assert server_pid(worker) == pid
    assert not [p for p in psutil.Process(pid).children(recursive=True)]  # the hung child is gone
    good_job_runs(worker, 6)


def test_a_leaking_job_is_killed_at_its_memory_cap(worker: Worker) -> None:
    good_job_runs(worker, 7)
    pid = server_pid(worker)
    attempt = worker.attempts.run(job("tests.testkit.fault_policies:leak"), worker.settings.work_dir / "leak.eval")
    assert (attempt.outcome, attempt.error_class) == ("failed", "memory"), attempt
    assert attempt.error and "over the job memory cap of 600 MB" in attempt.error
    assert server_pid(worker) == pid
    assert psutil.Process(pid).memory_info().rss < 600 * 2**20
    good_job_runs(worker, 8)


def test_a_dead_server_fails_its_jobs_and_the_next_job_starts_a_new_one(worker: Worker) -> None:
    good_job_runs(worker, 9)
    pid = server_pid(worker)
    hung = job("tests.testkit.fault_policies:hang", time_limit=60)
    out = worker.settings.work_dir / "orphan.eval"
    assert worker.warm is not None
    running = worker.warm.start(hung, out, out.with_suffix(".stderr"), {})
    deadline = time.monotonic() + 60
    while running.pid is None:  # forked: the server told its pid
        assert running.wait(0.2) is None and time.monotonic() < deadline
    psutil.Process(pid).kill()
    assert running.wait(30) is not None
    assert "server died" in out.with_suffix(".stderr").read_text()
    assert gone(running.pid)  # the orphaned child was killed with it
    good_job_runs(worker, 10)
    assert server_pid(worker) != pid


def test_a_job_killed_mid_sample_leaves_no_sample_buffer(worker: Worker) -> None:
    """Inspect keeps a sample buffer per log directory while an eval runs and deletes a
    leaked one only when it is 3 days old; until then every eval on the machine stats it.
    A job killed mid-sample leaked it, and its log directory: the server clears both."""
    from ct_fleet.inspect_private import sample_buffer_dir
    from ct_fleet.worker.inspect_job import job_log_dir

    hung = job("tests.testkit.fault_policies:hang", time_limit=60)
    out = worker.settings.work_dir / "killed.eval"
    assert worker.warm is not None
    running = worker.warm.start(hung, out, out.with_suffix(".stderr"), {})
    deadline = time.monotonic() + 60
    while running.pid is None or not list(sample_buffer_dir(job_log_dir(out, running.pid)).glob("*.db")):
        assert running.wait(0.2) is None and time.monotonic() < deadline, "the sample never started"
    log_dir = job_log_dir(out, running.pid)
    own = wait_for_children(running.pid)
    psutil.Process(running.pid).kill()  # the job's process alone, as the kernel's OOM killer would
    assert running.wait(30) is not None
    assert not sample_buffer_dir(log_dir).exists() and not log_dir.exists()
    assert all(gone(p.pid) for p in own), "the job's own process outlived it"
    good_job_runs(worker, 11)


def test_an_attempt_that_ends_badly_clears_only_its_own_leftovers(worker: Worker) -> None:
    """A job handed out twice may run twice at once on one worker, to the same OUT. When one
    attempt is killed, the server clears its log directory, not the other attempt's, which
    still runs and finishes."""
    from ct_fleet.worker.inspect_job import job_log_dir

    out = worker.settings.work_dir / "twice.eval"
    assert worker.warm is not None
    deadline = time.monotonic() + 60

    def started(attempt: WarmJob) -> Path:
        while attempt.pid is None or not job_log_dir(out, attempt.pid).exists():
            assert attempt.wait(0.2) is None and time.monotonic() < deadline, "the attempt never started"
        return job_log_dir(out, attempt.pid)

    first = worker.warm.start(
        job("tests.testkit.fault_policies:slow"), out, out.with_suffix(".first"), {"CT_FAULT_SLEEP": "10"}
    )
    first_dir = started(first)
    second = worker.warm.start(
        job("tests.testkit.fault_policies:hang", time_limit=60), out, out.with_suffix(".second"), {}
    )
    second_dir = started(second)
    assert second.pid is not None
    psutil.Process(second.pid).kill()
    assert second.wait(30) is not None
    assert not second_dir.exists()
    assert first_dir.exists() and first.wait(0) is None  # still running, its directory kept
    assert first.wait(60) == 0, out.with_suffix(".first").read_text()[-2000:]


def test_a_spot_notice_ends_checkpointed_jobs_at_once_and_no_others(worker: Worker) -> None:
    """At a spot notice a checkpointed job ends at once, keeping its last committed
    checkpoint for the attempt that takes it over (run on, it would write checkpoints that
    attempt is reading); a job without checkpoints runs on and may still finish in time."""
    checkpointed = job(
        "tests.testkit.fault_policies:hang",
        time_limit=60,
        inspect_options={"checkpoint": {"checkpoint_file": {"trigger": {"type": "turn", "every": 1}}}},
    )
    s3 = session.client("s3")
    if worker.settings.bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=worker.settings.bucket)  # where the job's checkpoints go
    ended: list[Attempt] = []
    running = threading.Thread(
        target=lambda: ended.append(worker.attempts.run(checkpointed, worker.settings.work_dir / "noticed.eval"))
    )
    running.start()
    try:
        deadline = time.monotonic() + 60
        while not worker.attempts.checkpointing:
            assert running.is_alive() and time.monotonic() < deadline, ended
            time.sleep(0.05)
        assert worker.attempts.stop_checkpointed(timeout=30)
        running.join(30)
        assert ended and (ended[0].outcome, ended[0].error_class) == ("failed", "cancelled"), ended
        good_job_runs(worker, 12)  # the notice is still set: a job without checkpoints is not ended by it
    finally:
        worker.attempts.notice.clear()
        running.join(60)
