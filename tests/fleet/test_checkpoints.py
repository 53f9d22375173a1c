"""--checkpoint on the fleet: restic without a download, a job's checkpoints in S3, resumed
on another worker, kept on disk by the embedded cloud for a rerun, and a checkpoint that
fails is not a silent success.

A 13-step agent (react() with bash in Inspect's local sandbox, scripted by
tests/testkit/openai_stub.py: 14 model calls) runs on the local fleet with `--checkpoint turn:1`.
Its worker's job loop is SIGKILLed at a third: the replacement worker (another instance
directory) resumes the sample from its last committed checkpoint. At two thirds the
controller, its embedded cloud and its worker are all SIGKILLed: the rerun of the command
puts the checkpoints kept under runs/<fleet>/ back in its new S3 and resumes the sample
again. The merged log shows the resume as Inspect writes it, the model server sees only
the turns not checkpointed plus at most one redone, and nothing of the checkpoints (nor a
restic password) is left in S3 or on disk once the result is stored.

The copy on disk is whole wherever a kill cuts it short (no commit marker without its
snapshot), and a checkpoint that cannot be used anyway (torn so) starts the sample fresh
instead of failing it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import boto3
import psutil
import pytest
from inspect_ai.log import EvalError, read_eval_log

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


def _job_process(
    where: Path, job: WorkMessage, out: Path, s3, stub, path: str | None = None, files: dict[str, str] | None = None
) -> subprocess.Popen:
    """The job as a worker runs it: its own process, from a code root of its own (AGENT as
    agent.py, unless FILES says what the code root holds)."""
    where.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {"agent.py": AGENT}).items():
        (where / name).write_text(text)
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


def _job(job_id: str, pause: float = 0.5, n: int = STEPS, config: dict | None = None) -> WorkMessage:
    return WorkMessage(
        fleet_id="ckpt",
        job_id=job_id,
        sample_id="long",
        epoch=1,
        task_spec="agent.py@steps",
        task_args={"n": n, "pause": pause},
        model="openai-api/stubai/scripted",
        code_sha="x",
        result_key=f"ckpt/{job_id}.eval",
        time_limit=None,
        inspect_options={"checkpoint": {"checkpoint_file": config or CONFIG}},
    )


def _stored(client, fleet_id: str) -> list[str]:
    """The keys under the fleet's checkpoints prefix in S3."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{fleet_id}/checkpoints/")
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _committed(client, fleet_id: str) -> list[str]:
    """The commit markers (ckpt-NNNNN.json) of the fleet's checkpoints."""
    return [k for k in _stored(client, fleet_id) if k.rsplit("/", 1)[-1].startswith("ckpt-")]


def _newest_attempt_markers(keys: list[str]) -> int:
    """Commit markers in the newest attempt's checkpoint dirs (an older attempt's dirs,
    copied into the newer one, may not be deleted yet)."""
    attempts: dict[str, int] = {}
    for key in keys:
        parts = key.split("/")
        attempt = next((p for p in parts if p.endswith(".checkpoints")), None)
        if attempt is not None:
            attempts[attempt] = attempts.get(attempt, 0) + parts[-1].startswith("ckpt-")
    return attempts[max(attempts)] if attempts else 0


def _mirrored(run_dir: Path) -> list[str]:
    root = run_dir / "checkpoints"
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()] if root.is_dir() else []


def _power_cut(proc, runs: Path) -> None:
    """The controller, its embedded cloud and every worker SIGKILLed, as a machine that
    restarts would leave them: nothing but the run directory is left."""
    proc.send_signal(signal.SIGKILL)  # bin/ct-fleet execs python: this is the controller
    proc.communicate()
    moto = int((fleet_dir(runs) / "moto.pid").read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(moto, signal.SIGKILL)
    wait_for(lambda: [kill(p) for p in processes_in(runs)] == [] and not psutil.pid_exists(moto), timeout=60)


@pytest.mark.faults
def test_a_sample_resumes_after_a_lost_worker_and_after_a_power_cut(tmp_path: Path, stub) -> None:
    """The local fleet: a 13-step agent with `--checkpoint turn:1` (its local sandbox is not
    captured: the fleet's default). Its worker's job loop is SIGKILLed at a third: a
    replacement worker (another instance directory, nothing of the first's read) resumes
    the sample from its last committed checkpoint. At two thirds the controller, its
    embedded cloud (moto, and the S3 the checkpoints were in) and the worker are all
    SIGKILLed; the rerun of the command puts the checkpoints kept under runs/<fleet>/ back
    in its new S3 and the sample resumes again."""
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
    env = env_for(runs, HOME=str(tmp_path / "home"))
    proc = launch(args, env=env, cwd=project)
    start = _calls(stub)
    wait_for(lambda: _calls(stub) >= start + (STEPS + 1) // 3 or proc.poll() is not None, timeout=300)
    (worker,) = processes_in(runs, "ct_fleet.worker")
    kill(worker)
    run_dir = fleet_dir(runs)
    s3 = embedded_client(run_dir, "s3")
    assert _committed(s3, run_dir.name), "no checkpoint committed before the worker was killed"
    # At two thirds, once the copy on disk (it looks every few seconds) holds checkpoints
    # of the second attempt's own, the power cut.
    wait_for(
        lambda: (
            (_calls(stub) >= start + (STEPS + 1) * 2 // 3 and _newest_attempt_markers(_mirrored(run_dir)) > STEPS // 2)
            or proc.poll() is not None
        ),
        timeout=300,
    )
    assert proc.poll() is None, "the run ended before the power cut"
    _power_cut(proc, runs)
    kept = _newest_attempt_markers(_mirrored(run_dir))
    assert kept, "no checkpoint kept on disk"
    before = _calls(stub)
    # The rerun, held before its merge (the embedded cloud still up).
    rerun = launch(args, env={**env, "CT_FLEET_PAUSE_AT": "verify"}, cwd=project)
    marker = paused_at(runs, "verify", timeout=300)
    left = _stored(embedded_client(run_dir, "s3"), run_dir.name)
    marker.unlink()
    code, out, err = finish(rerun)
    assert code == 0, out + err
    assert "checkpoint file(s) kept on disk put back" in err, err
    assert left == [], f"checkpoint data left in S3 after the job's result was stored: {left}"
    assert _mirrored(run_dir) == [], "the copy on disk outlived the run"
    # Nor in Inspect's staging on the workers (they share this HOME's cache): each attempt's
    # was dropped, the killed ones' by the attempt that followed.
    assert list(tmp_path.rglob("restic-config.json")) == [], "a restic password left on disk"
    # The lost attempt was counted by the first controller (the rerun's report is of the
    # rerun's attempts only).
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [a["error_class"] for a in attempts if a["outcome"] == "retry"] == ["lost"], attempts
    redone = _calls(stub) - before
    # Only the turns after the last checkpoint kept, plus at most one redone.
    assert redone <= (STEPS + 1) - kept + 1, (redone, kept)
    (merged,) = (run_dir / "merged").glob("*.eval")
    log = read_eval_log(str(merged))
    assert log.status == "success" and log.samples
    sample = log.samples[0]
    resumes = [
        e
        for e in sample.events
        if e.event == "info" and getattr(e, "source", None) == "checkpoint" and (e.data or {}).get("event") == "resume"
    ]
    assert resumes, "no resume event in the transcript"
    assert f"step {STEPS - 1}" in sample.output.completion
    # The rerun counts the resume and the calls it saved; its tokens are the sample's over
    # every attempt (the log's stats count only the last).
    saved = sum(1 for e in sample.events[: sample.events.index(resumes[-1])] if e.event == "model")
    assert saved >= kept and redone <= (STEPS + 1) - saved + 1, (saved, redone)
    assert f"resumed from checkpoints: 1 sample(s), {saved} model call(s) and " in out, out
    # Its time counts every attempt, as its usage does (Inspect's retry writes the last
    # attempt's alone): Inspect's own clock, each event's working_start, climbs across
    # attempts, and the sample's working time reaches it.
    clock = max(e.working_start for e in sample.events[sample.events.index(resumes[-1]) :])
    assert sample.working_time is not None and sample.total_time is not None
    assert clock <= sample.working_time <= sample.total_time, (clock, sample.working_time, sample.total_time)
    assert stat(out, "model usage:") == sum(u.total_tokens for u in sample.model_usage.values()), out
    # The run report says so too, with what the checkpoints cost as Inspect's events say it.
    figures = json.loads((run_dir / "report.json").read_text())["checkpoints"]
    taken = [e for e in sample.events if e.event == "checkpoint"]
    assert (figures["samples_resumed"], figures["model_calls_saved"]) == (1, saved), figures
    assert 0 < figures["seconds_saved"] < sample.total_time, figures
    assert f"{figures['seconds_saved']:.1f} s of sample time not spent again" in out, out
    assert (figures["samples_checkpointed"], figures["checkpoints"]) == (1, len(taken)), figures
    assert figures["seconds"] > 0 and figures["bytes_added"] == sum(e.size_bytes for e in taken), figures
    assert "<h2>Checkpoints</h2>" in (run_dir / "report.html").read_text()
    # Resumed elsewhere: a replacement after the lost worker, a new worker after the rerun.
    assert len([p for p in (run_dir / "instances").iterdir() if p.is_dir()]) == 3
    assert_nothing_running(runs)
    # The command's next estimate says what a checkpoint costs, from this run's report.
    code, out, err = finish(launch([*args, "--ec2-arg", "estimate=true"], env=env, cwd=project))
    assert code == 0, out + err
    shown = " ".join((out + err).split())
    assert f"mean of {len(taken)} checkpoints of earlier runs' samples" in shown, shown


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
    # Were this a resume, its failure in Inspect's checkpoint code would start the sample
    # fresh; a failure of its own (a sandbox that did not start) ends the attempt as it is.
    assert checkpoints.resume_failure([log]) is not None
    log.samples[0].error = EvalError(
        message="RuntimeError('no sandbox')", traceback="sandbox/docker", traceback_ansi=""
    )
    assert checkpoints.resume_failure([log]) is None


def test_a_checkpoint_that_cannot_be_resumed_starts_the_sample_fresh(tmp_path: Path, stub, s3) -> None:
    """A kept checkpoint torn as a copy cut short left it (the newest commit marker without
    its restic snapshot): Inspect's hydrate fails the resumed sample, so the job starts the
    sample fresh and says so, and drops the checkpoints it could not use."""
    client, bucket = s3["client"], s3["bucket"]
    job = _job("torn", pause=0.0, n=3)
    prefix = f"{job.fleet_id}/checkpoints/{job.job_id}/"

    def keys() -> list[str]:
        return store_keys(client, bucket, prefix)

    first = _job_process(tmp_path / "w1", job, tmp_path / "out1.eval", s3, stub)
    markers = lambda: sorted(k for k in keys() if k.rsplit("/", 1)[-1].startswith("ckpt-"))  # noqa: E731
    wait_for(lambda: len(markers()) >= 2 or first.poll() is not None, timeout=120)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert len(markers()) >= 2, (tmp_path / "w1" / "stderr").read_text()[-3000:]
    newest = markers()[-1]
    snapshot = json.loads(client.get_object(Bucket=bucket, Key=newest)["Body"].read())["host"]["snapshot_id"]
    torn = newest.rsplit("/", 1)[0] + f"/restic/host/snapshots/{snapshot}"
    client.delete_object(Bucket=bucket, Key=torn)
    (started,) = [k for k in keys() if k.endswith(".eval")]
    second = _job_process(tmp_path / "w2", job, tmp_path / "out2.eval", s3, stub)
    assert second.wait(timeout=300) == 0, (tmp_path / "w2" / "stderr").read_text()[-3000:]
    said = (tmp_path / "w2" / "stderr").read_text()
    assert "could not be resumed" in said and "starting the sample fresh" in said, said[-3000:]
    log = read_eval_log(str(tmp_path / "out2.eval"))
    assert log.status == "success" and log.samples and log.samples[0].error is None
    assert not any(checkpoints.is_resume_event(e) for e in log.samples[0].events)
    assert "step 2" in log.samples[0].output.completion
    assert list((tmp_path / "w2").rglob("restic-config.json")) == [], "its staging was left"
    left = keys()
    assert started not in left and not any(k.startswith(started.removesuffix(".eval")) for k in left), left


DOCKER_AGENT = AGENT.replace('sandbox="local"', 'sandbox=("docker", "compose.yaml")')
COMPOSE = """services:
  default:
    image: "{image}"
    pull_policy: never
    init: true
    network_mode: none
    working_dir: /root
    command: ["tail", "-f", "/dev/null"]
    stop_grace_period: 1s
    labels:
      ct-fleet.test: "{label}"
"""


def test_a_file_the_agent_wrote_in_its_docker_sandbox_is_back_after_the_resume(
    tmp_path: Path, stub, s3, docker_images: list[str]
) -> None:
    """A Docker sandbox is captured with the sample (its default user's home, Inspect's
    default): the agent appends `step K` to steps.txt in /root at each step, its job is
    killed once a checkpoint is committed, and the attempt that resumes it, in a new
    container from another directory, reads every step back with its last `cat`."""
    client, bucket = s3["client"], s3["bucket"]
    label = uuid.uuid4().hex
    files = {"agent.py": DOCKER_AGENT, "compose.yaml": COMPOSE.format(image=docker_images[0], label=label)}
    job = _job("docker", pause=0.0, n=3, config={"trigger": {"type": "turn", "every": 1}})
    prefix = f"{job.fleet_id}/checkpoints/{job.job_id}/"

    def containers() -> list[str]:
        filter_ = f"label=ct-fleet.test={label}"
        return subprocess.run(
            ["docker", "ps", "-aq", "--filter", filter_], capture_output=True, text=True
        ).stdout.split()

    try:
        first = _job_process(tmp_path / "w1", job, tmp_path / "out1.eval", s3, stub, files=files)
        committed = lambda: [k for k in store_keys(client, bucket, prefix) if "/ckpt-" in k]  # noqa: E731
        wait_for(lambda: committed() or first.poll() is not None, timeout=200)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert committed(), (tmp_path / "w1" / "stderr").read_text()[-3000:]
        killed = containers()  # the killed attempt's: nobody removed it
        second = _job_process(tmp_path / "w2", job, tmp_path / "out2.eval", s3, stub, files=files)
        assert second.wait(timeout=300) == 0, (tmp_path / "w2" / "stderr").read_text()[-3000:]
        # The resume ran in a container of its own, which Inspect removed when it ended.
        assert len(killed) == 1 and containers() == killed, (killed, containers())
    finally:
        if containers():
            subprocess.run(["docker", "rm", "-f", *containers()], capture_output=True, check=False)
    log = read_eval_log(str(tmp_path / "out2.eval"))
    assert log.status == "success" and log.samples
    sample = log.samples[0]
    assert any(checkpoints.is_resume_event(e) for e in sample.events), "the sample started fresh"
    assert sample.output.completion.split() == ["step", "1", "step", "2"], sample.output.completion
    boxes = [e for e in sample.events if e.event == "checkpoint" and getattr(e, "sandboxes", None)]
    assert boxes, "no checkpoint captured the sandbox"


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


def _attempt(job: str, name: str, ids: range) -> dict[str, bytes]:
    """One attempt's started log and checkpoint dir, laid out as Inspect writes them to S3:
    a restic repository with one snapshot per committed checkpoint and its marker."""
    sample = f"{job}/{name}.checkpoints/long__1"
    files = {
        f"{job}/{name}.eval": b"started log",
        f"{sample}/restic/restic-config.json": b'{"restic_password": "secret"}',
        f"{sample}/restic/host/config": b"repo config",
        f"{sample}/restic/host/keys/k": b"key",
    }
    for n in ids:
        files |= {
            f"{sample}/restic/host/data/0{n}/d{n}": b"x" * 3000,
            f"{sample}/restic/host/index/i{n}": b"index",
            f"{sample}/restic/host/snapshots/s{n}": b"snapshot",
            f"{sample}/ckpt-{n:05d}.json": b"{}",
        }
    return files


def _whole(files: set[str]) -> bool:
    """Every commit marker with its snapshot, every started log with its checkpoint dir."""
    for rel in files:
        head, _, name = rel.rpartition("/")
        if name.startswith("ckpt-") and f"{head}/restic/host/snapshots/s{int(name[5:10])}" not in files:
            return False
        if rel.count("/") == 1 and rel.endswith(".eval"):
            dir_ = rel.removesuffix(".eval") + ".checkpoints/"
            if not any(f.startswith(dir_) and "/ckpt-" in f for f in files):
                return False
    return True


def test_the_embedded_clouds_checkpoints_are_kept_whole_on_disk_and_put_back_in_a_new_s3(tmp_path: Path, s3) -> None:
    """The copy of the fleet's checkpoints on disk is one a resume can use wherever the
    controller was killed in a look at S3: a commit marker only with its snapshot, a started
    log only with its attempt's checkpoints (a marker fetched before its snapshot made the
    rerun's resume fail in Inspect's hydrate). A rerun on a new, empty S3 puts back the
    copies of the jobs still to run, in the same order."""
    from ct_fleet.controller.fleet.checkpoint_mirror import CheckpointMirror

    client, bucket = s3["client"], s3["bucket"]
    prefix = "mirrored/checkpoints/"
    # a's second attempt resumed the first (Inspect copied its dir), which is not deleted yet.
    a = _attempt("a", "1", range(1, 2)) | _attempt("a", "2", range(1, 4))
    for rel, body in {**a, **_attempt("b", "1", range(1, 2)), "../escape": b"?"}.items():
        client.put_object(Bucket=bucket, Key=prefix + rel, Body=body)
    fetched: list[str] = []
    client.meta.events.register(
        "provide-client-params.s3.GetObject", lambda params, **_: fetched.append(params["Key"].removeprefix(prefix))
    )
    run_dir = tmp_path / "run"
    mirror = CheckpointMirror(client, bucket, "mirrored", run_dir)
    mirror.sync()
    assert {str(rel) for rel in mirror.kept()} == set(fetched) == {*a, *_attempt("b", "1", range(1, 2))}
    # Files land one by one, in this order: wherever a kill stops it, what is on disk is whole.
    assert all(_whole(set(fetched[:n])) for n in range(len(fetched) + 1)), fetched
    assert not (run_dir / "escape").exists()
    # The worker moved on: b finished (its prefix deleted), a's first attempt was dropped.
    for key in store_keys(client, bucket, prefix):
        if key.startswith(prefix + "b/") or key.startswith(prefix + "a/1"):
            client.delete_object(Bucket=bucket, Key=key)
    mirror.sync()
    assert {str(rel) for rel in mirror.kept()} == set(_attempt("a", "2", range(1, 4)))
    # A new, empty S3: a's copy goes back byte for byte, in shipping order.
    for key in store_keys(client, bucket, prefix):
        client.delete_object(Bucket=bucket, Key=key)
    (mirror.root / "c").mkdir()
    (mirror.root / "c" / "1.eval").write_bytes(b"a job with its result")
    (mirror.root / "a" / "2.checkpoints" / "long__1" / "ckpt-00006.json.part").write_bytes(b"{")
    uploaded: list[str] = []
    client.meta.events.register(
        "provide-client-params.s3.PutObject", lambda params, **_: uploaded.append(params["Key"].removeprefix(prefix))
    )
    assert mirror.restore(["a"]) == len(uploaded) == len(_attempt("a", "2", range(1, 4)))
    assert not (mirror.root / "c").exists()
    assert all(_whole(set(uploaded[:n])) for n in range(len(uploaded) + 1)), uploaded
    got = client.get_object(Bucket=bucket, Key=prefix + "a/2.checkpoints/long__1/restic/host/data/03/d3")["Body"].read()
    assert got == b"x" * 3000
    for key in store_keys(client, bucket, prefix):  # a's result is stored: the worker deleted them
        client.delete_object(Bucket=bucket, Key=key)
    with mirror:
        pass
    assert not mirror.root.exists(), "the copy on disk outlived its checkpoints"


def store_keys(client, bucket: str, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_the_estimate_says_what_a_checkpoint_costs_and_where_the_figure_comes_from(tmp_path: Path) -> None:
    """Before launch: the drill's measure, until earlier fleets of the same setting and
    policy have run reports that say what their checkpoints cost."""
    from ct_fleet.cli.display import estimate_table
    from ct_fleet.controller.planning import estimate

    drill = estimate.checkpoint_cost(tmp_path, "toyarena", "honest")
    assert (drill.seconds_each, drill.per_sample) == (estimate.DRILL_CHECKPOINT_SECONDS, None)
    assert "bench/checkpoint_drill.py" in str(drill)
    for name, policy, figures in (
        ("f1", "honest", {"checkpoints": 10, "seconds": 6.0, "bytes_added": 200_000, "samples_checkpointed": 2}),
        ("f2", "honest", {"checkpoints": 6, "seconds": 4.0, "bytes_added": 120_000, "samples_checkpointed": 2}),
        ("f3", "attack", {"checkpoints": 100, "seconds": 900.0, "bytes_added": 1, "samples_checkpointed": 1}),
        ("f4", "honest", None),  # a run without --checkpoint
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "durations.json").write_text(
            json.dumps({"setting": "toyarena", "policy": policy, "seconds": [1.0]})
        )
        (tmp_path / name / "report.json").write_text(json.dumps({"checkpoints": figures}))
    seen = estimate.checkpoint_cost(tmp_path, "toyarena", "honest")
    assert (seen.seconds_each, seen.bytes_each, seen.per_sample) == (10.0 / 16, 20_000, 4)
    est = estimate.estimate(
        jobs=4, workers=1, concurrency=4, seconds_per_job=60, source="x", price=0.5, checkpoints=seen
    )
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(estimate_table(est, "c6i.large"))
    shown = " ".join(console.export_text().split())
    assert "checkpoints: ~0.6 s of the agent's time and 20 KB stored each, 4 per sample (~2 s)" in shown, shown
    assert "mean of 16 checkpoints of earlier runs' samples" in shown, shown
