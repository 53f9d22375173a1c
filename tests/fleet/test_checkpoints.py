"""--checkpoint on the fleet: restic without a download, a job's checkpoints in S3, resumed
on another worker, and a checkpoint that fails is not a silent success.

A 13-step agent (react() with bash in Inspect's local sandbox, scripted by
tests/testkit/openai_stub.py: 14 model calls) runs on the local fleet with `--checkpoint turn:1`.
Its worker's job loop is SIGKILLed at about two thirds; the replacement worker (another
instance directory) resumes the sample from its last committed checkpoint (the resume
event as Inspect writes it), the model server sees only the turns not checkpointed plus at
most one redone, and nothing of the checkpoints is left in S3 once the result is stored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from inspect_ai.log import read_eval_log

from ct_fleet import restic
from ct_fleet.protocol import WorkMessage
from ct_fleet.worker import checkpoints
from testkit.fleet import (
    FAST,
    ONE_WORKER,
    assert_nothing_running,
    embedded_client,
    env_for,
    finish,
    fleet_dir,
    kill,
    launch,
    model_stub,
    paused_at,
    processes_in,
    stat,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-stub-" + uuid.uuid4().hex
STEPS = 13  # model calls: STEPS + 1
MODEL = "openai-api/stubai/scripted"
BUCKET = f"lb-fleet-ckpt-{uuid.uuid4().hex[:8]}"
AGENT = """
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import bash


@task
def steps(n: int = 13, pause: float = 0.5):
    sample = Sample(id="long", input=f"Take {n} steps of {pause} seconds", target=f"step {n - 1}")
    return Task(dataset=MemoryDataset([sample], name="steps"), solver=react(tools=[bash()]), scorer=includes(), sandbox="local")
"""
# The local sandbox is this machine: nothing of it is captured (Inspect would back up $HOME).
CONFIG = {"trigger": {"type": "turn", "every": 1}, "sandbox_paths": {"default": []}}


def fake_restic(where: Path, version: str, backup_help: str, backup_fails: bool = False) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "restic"
    # A backup that fails, whatever else the real restic does.
    fail = 'for a in "$@"; do [ "$a" = backup ] && { echo "Fatal: disk full" >&2; exit 1; }; done\n'
    real = shutil.which("restic") or "false"
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then echo "restic {version} compiled with go"; exit 0; fi\n'
        f'if [ "$1" = backup ] && [ "$2" = --help ]; then echo "{backup_help}"; exit 0; fi\n'
        + (fail if backup_fails else "")
        + f'exec {real} "$@"\n'
    )
    path.chmod(0o755)
    return path


def test_restic_is_found_checked_and_linked_where_inspect_looks(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(restic.NoRestic, match="none is on PATH"):
        restic.find(str(tmp_path / "empty"))
    old = fake_restic(tmp_path / "old", "0.14.0", "  --dry-run  do not upload")
    with pytest.raises(restic.NoRestic, match=r"0\.14\.0 \(its backup lacks --no-scan\)"):
        restic.find(str(old.parent))
    new = fake_restic(tmp_path / "new", "0.18.0", "  --no-scan  do not run scanner")
    found = restic.find(str(new.parent))
    assert found.version == "0.18.0"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    linked = restic.provide(found)
    assert linked.parent == tmp_path / "cache" / "inspect_ai" / "bin" and linked.name.startswith("restic_")
    assert linked.resolve() == new.resolve()
    other = fake_restic(tmp_path / "other", "0.18.0", "--no-scan")
    assert restic.provide(restic.check(other)).resolve() == other.resolve()  # our link follows the PATH


def test_only_a_config_file_keeps_checkpoints() -> None:
    job = _job("j")
    assert checkpoints.wanted(job) and not checkpoints.retained(job)
    assert not checkpoints.wanted(replace(job, inspect_options={}))
    assert not checkpoints.retained(replace(job, inspect_options={"checkpoint": "turn:3"}))
    kept = {"checkpoint": {"checkpoint_file": {**CONFIG, "retention": "retain"}}}
    assert checkpoints.retained(replace(job, inspect_options=kept))
    assert checkpoints.location("b", "f", "j") == "s3://b/f/checkpoints/j"


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory):
    with model_stub(tmp_path_factory.mktemp("stub"), KEY, "--rate-limit-every", "0") as running:
        yield running


@pytest.fixture(scope="module")
def s3(moto_server):
    client = boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"lb-fleet-ckpt-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    return {"client": client, "bucket": bucket, "endpoint": moto_server.endpoint_url}


def _calls(stub) -> int:
    log = Path(str(stub["log"]))
    return sum(1 for line in log.read_text().splitlines() if json.loads(line)["status"] == 200) if log.exists() else 0


def _job_process(where: Path, job: WorkMessage, out: Path, s3, stub, path: str | None = None) -> subprocess.Popen:
    """The job as a worker runs it: its own process, from a code root of its own."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "agent.py").write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=s3["endpoint"],
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="us-east-1",
        STUBAI_API_KEY=KEY,
        STUBAI_BASE_URL=str(stub["base_url"]),
        XDG_CACHE_HOME=str(where / "cache"),  # nothing of another attempt's machine
        XDG_DATA_HOME=str(where / "data"),
        PATH=path or env["PATH"],
        **{checkpoints.CHECKPOINTS_ENV: checkpoints.location(s3["bucket"], job.fleet_id, job.job_id)},
    )
    with open(where / "stderr", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "ct_fleet.worker.runner", job.to_json(), str(out)],
            cwd=where,
            env=env,
            stderr=err,
            stdout=err,
            start_new_session=True,
        )


def _job(job_id: str, pause: float = 0.5) -> WorkMessage:
    return WorkMessage(
        fleet_id="ckpt",
        job_id=job_id,
        sample_id="long",
        epoch=1,
        task_spec="agent.py@steps",
        task_args={"n": STEPS, "pause": pause},
        model="openai-api/stubai/scripted",
        code_sha="x",
        result_key=f"ckpt/{job_id}.eval",
        time_limit=None,
        inspect_options={"checkpoint": {"checkpoint_file": CONFIG}},
    )


def _stored(client, fleet_id: str) -> list[str]:
    """The keys under the fleet's checkpoints prefix in S3."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{fleet_id}/checkpoints/")
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _committed(client, fleet_id: str) -> list[str]:
    """The commit markers (ckpt-NNNNN.json) of the fleet's checkpoints."""
    return [k for k in _stored(client, fleet_id) if k.rsplit("/", 1)[-1].startswith("ckpt-")]


@pytest.mark.faults
def test_a_worker_killed_at_two_thirds_resumes_its_sample_on_another(tmp_path: Path, stub) -> None:
    """The local fleet: a 13-step agent with `--checkpoint turn:1` (its local sandbox is not
    captured: the fleet's default), its worker's job loop SIGKILLed at two thirds. The run
    completes on a replacement worker (another instance directory, nothing of the first's
    read), which resumes the sample from its last committed checkpoint."""
    project, runs = tmp_path / "project", tmp_path / "runs"
    project.mkdir()
    runs.mkdir()
    (project / "agent.py").write_text(AGENT)
    (runs / ".env").write_text(f"STUBAI_API_KEY={KEY}\nSTUBAI_BASE_URL={stub['base_url']}\n")
    args = ["eval", "agent.py@steps", "-T", f"n={STEPS}", "-T", "pause=0.2", "--model", MODEL]
    args += ["--checkpoint", "turn:1", *FAST, *ONE_WORKER, "--ec2-arg", f"bucket={BUCKET}"]
    # The job's message hides for 10 minutes: only the controller's release of a lost
    # worker's jobs brings it back within the test's time.
    args += ["--ec2-arg", "visibility_timeout=600", "--ec2-arg", "heartbeat_interval=2"]
    # A home of its own: the bash tool's login shell reads none of the machine's profile
    # (a shell killed mid-way through it may leave a lock the next one waits on).
    (tmp_path / "home").mkdir()
    env = env_for(runs, CT_FLEET_PAUSE_AT="verify", HOME=str(tmp_path / "home"))
    proc = launch(args, env=env, cwd=project)
    start = _calls(stub)
    kill_at = start + (STEPS + 1) * 2 // 3  # 9 of 14 calls
    wait_for(lambda: _calls(stub) >= kill_at or proc.poll() is not None, timeout=300)
    (worker,) = processes_in(runs, "ct_fleet.worker")
    kill(worker)
    before = _calls(stub)
    run_dir = fleet_dir(runs)
    s3 = embedded_client(run_dir, "s3")
    committed = _committed(s3, run_dir.name)
    assert committed, "no checkpoint committed before the kill"
    # Every job done, the controller held before its merge (the embedded cloud still up).
    marker = paused_at(runs, "verify", timeout=300)
    left = _stored(s3, run_dir.name)
    marker.unlink()
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert left == [], f"checkpoint data left in S3 after the job's result was stored: {left}"
    # The lost attempt counts, and shows with the failed attempts.
    assert (stat(out, "attempts"), stat(out, "redeliveries")) == (2, 1), out
    failures = json.loads((fleet_dir(runs) / "report.json").read_text())["failures"]
    assert [(f["error_class"], f["attempts"]) for f in failures] == [("lost", 1)], failures
    redone = _calls(stub) - before
    # Only the turns after the last committed checkpoint, plus at most one redone.
    assert redone <= (STEPS + 1) - len(committed) + 1, (redone, len(committed))
    assert redone < STEPS + 1
    (merged,) = (run_dir / "merged").glob("*.eval")
    log = read_eval_log(str(merged))
    assert log.status == "success" and log.samples
    sample = log.samples[0]
    resumes = [e for e in sample.events if e.event == "info" and getattr(e, "source", None) == "checkpoint"]
    assert any((e.data or {}).get("event") == "resume" for e in resumes), "no resume event in the transcript"
    assert f"step {STEPS - 1}" in sample.output.completion
    # The run counts the resume and the calls it saved; its tokens are the sample's over
    # every attempt (the log's stats count only the last).
    saved = sum(1 for e in sample.events[: sample.events.index(resumes[-1])] if e.event == "model")
    assert saved >= len(committed) and redone <= (STEPS + 1) - saved + 1, (saved, redone)
    assert f"resumed from checkpoints: 1 sample(s), {saved} model call(s) not made again" in out, out
    assert stat(out, "model usage:") == sum(u.total_tokens for u in sample.model_usage.values()), out
    # The run report says so too, with what the checkpoints cost as Inspect's events say it.
    figures = json.loads((run_dir / "report.json").read_text())["checkpoints"]
    taken = [e for e in sample.events if e.event == "checkpoint"]
    assert (figures["samples_resumed"], figures["model_calls_saved"]) == (1, saved), figures
    assert (figures["samples_checkpointed"], figures["checkpoints"]) == (1, len(taken)), figures
    assert figures["seconds"] > 0 and figures["bytes_added"] == sum(e.size_bytes for e in taken), figures
    assert "<h2>Checkpoints</h2>" in (run_dir / "report.html").read_text()
    assert len([p for p in (run_dir / "instances").iterdir() if p.is_dir()]) == 2  # resumed elsewhere
    assert_nothing_running(runs)


def test_a_checkpoint_that_fails_fails_the_sample(tmp_path: Path, stub, s3) -> None:
    broken = fake_restic(tmp_path / "bin", "0.18.0", "--no-scan", backup_fails=True)
    job = _job("broken", pause=0.0)
    proc = _job_process(
        tmp_path / "w", job, tmp_path / "out.eval", s3, stub, path=f"{broken.parent}:{os.environ['PATH']}"
    )
    assert proc.wait(timeout=300) == 0, (tmp_path / "w" / "stderr").read_text()[-3000:]
    log = read_eval_log(str(tmp_path / "out.eval"))
    assert log.samples and log.samples[0].error is not None, "a failing checkpoint ended as a success"
    assert "checkpoint failed" in log.samples[0].error.message, log.samples[0].error.message[-500:]


def test_a_local_sandbox_is_not_captured_unless_the_config_says_what_to_capture() -> None:
    from inspect_ai import Task
    from inspect_ai.dataset import Sample

    from ct_fleet.inspect_private import checkpoint_config

    config = checkpoint_config({"trigger": CONFIG["trigger"]})
    local = Task(dataset=[Sample(id="a", input="x")], sandbox="local")
    assert checkpoints.local_sandbox_default(config, local, "a", None).sandbox_paths == {"default": []}
    kept = checkpoint_config({"trigger": CONFIG["trigger"], "sandbox_paths": {"default": ["/work"]}})
    assert checkpoints.local_sandbox_default(kept, local, "a", None) is kept
    docker = Task(dataset=[Sample(id="a", input="x", sandbox="docker")], sandbox="local")
    assert checkpoints.local_sandbox_default(config, docker, "a", None) is config
    assert checkpoints.local_sandbox_default(config, local, "a", ("docker", "compose.yaml")) is config
