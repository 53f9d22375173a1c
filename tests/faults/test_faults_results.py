"""Results that are not what they seem: a local copy damaged on disk before the merge, the
S3 copy damaged too, and a "finished" log whose header says success but whose body is junk.
Each must end with nothing lost (or the loss named) and nothing left running.

Jobs are command jobs that copy results of an earlier run (job ids depend only on the
setting, policy, sample and epoch), so the fleet spends its time on the faults.
"""

from __future__ import annotations

import json
import re
import stat
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path

import boto3
import botocore.exceptions
import psutil
import pytest
import zstandard

from ct_fleet.evallog import zipio
from ct_fleet.protocol import queue_names
from testkit.fleet import (
    BAD_REPORTS,
    FAST,
    LOCAL,
    ONE_WORKER,
    assert_nothing_running,
    embedded_client,
    env_for,
    finish,
    fleet_dir,
    merged_pairs,
    paused_at,
    run_cli,
    start,
)


@pytest.fixture(scope="module")
def good_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("source")
    code, out, err = finish(
        start(runs, "--task-file", "smoke", *FAST, *LOCAL, *ONE_WORKER)
    )  # job ids follow the task args
    assert code == 0, out + err
    return fleet_dir(runs) / "jobs"


def copy_command(results: Path, junk: Path | None = None, junk_for: str = "") -> str:
    copy = f'cp {results}/"$CT_JOB_ID".evaljob "$CT_OUTPUT"'
    if junk is None:
        return copy
    return f'if [ "$CT_SAMPLE_ID" = {junk_for} ]; then cp {junk} "$CT_OUTPUT"; else {copy}; fi'


def damage(path: Path) -> None:
    """Zero a stretch in the middle of the file: the zip still opens, an entry does not inflate."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(data))


def assert_strangers_get_nothing(run_dir: Path) -> None:
    """The embedded cloud answers only the fleet's own key; what leads to it is the user's alone."""
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    for name in ("moto.port", "moto.pid", "moto.credentials"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o600, name
    port = (run_dir / "moto.port").read_text().strip()
    for key in ("ctfleetembedded", "AKIASTRANGER"):
        ssm = boto3.client(
            "ssm",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key=key,
        )
        with pytest.raises(botocore.exceptions.ClientError):
            ssm.get_parameters_by_path(Path="/", Recursive=True, WithDecryption=True)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/data.json", timeout=5)
    assert refused.value.code == 403
    embedded_client(run_dir, "ssm").get_parameters_by_path(Path="/", Recursive=True)  # the fleet's own key


@pytest.mark.faults
def test_a_result_damaged_before_the_merge_is_fetched_again_or_rerun(good_results: Path, tmp_path: Path):
    """Two results damaged in one run: one local copy only (fetched again from S3), one
    whose S3 copy is damaged too (run again)."""
    runs = tmp_path / "runs"
    proc = start(
        runs,
        "--task-file",
        "smoke",
        *LOCAL,
        "--command",
        copy_command(good_results),
        *FAST,
        *ONE_WORKER,
        CT_FLEET_PAUSE_AT="verify",
    )
    marker = paused_at(runs, "verify")
    run_dir = marker.parent
    local_only, both = sorted((run_dir / "jobs").glob("*.evaljob"))[:2]
    damage(local_only)
    damage(both)
    embedded_client(run_dir, "s3").put_object(
        Bucket="lb-fleet-results-migrated", Key=f"{run_dir.name}/{both.stem}.eval", Body=b"not a log at all"
    )
    marker.unlink()  # the run goes on: the check before the merge
    code, out, err = finish(proc)
    assert code == 0, out + err
    for victim in (local_only, both):
        assert f"local result of job {victim.stem} was damaged" in err
    assert f"result of job {both.stem} is unreadable" in err and "running it again" in err
    assert f"result of job {local_only.stem} is unreadable (" not in err  # its S3 copy was good: fetched, not rerun
    pairs = merged_pairs(runs)
    assert len(pairs) == 4 and len(set(pairs)) == 4
    assert_nothing_running(runs)


def malformed_log(good: Path, dest: Path) -> Path:
    """A log whose header says success, with a sample entry that is not JSON."""
    with zipfile.ZipFile(good) as src, zipio.open_writer(str(dest)) as out:
        for name in src.namelist():
            data = src.read(name)
            out.writestr(name, b"{this is not a sample" if name.startswith("samples/") else data)
        assert json.loads(src.read("header.json"))["status"] == "success"
    return dest


def with_task_args(good: Path, dest: Path, **args: str) -> Path:
    """`good` said to be a log of the same task with other task arguments."""
    with zipfile.ZipFile(good) as src, zipio.open_writer(str(dest)) as out:
        for name in src.namelist():
            data = src.read(name)
            if name == "header.json":
                head = json.loads(data)
                for field in ("task_args", "task_args_passed"):
                    head["eval"][field] = {**head["eval"][field], **args}
                data = json.dumps(head).encode()
            out.writestr(name, data)
    return dest


def other_task_log(good: Path, where: Path) -> Path:
    return with_task_args(good, where / "other-task.eval", policy="attack")


def _sample_of(log: Path) -> str:
    """The one sample of a job's log, by its entry's name (samples/{id}_epoch_{n}.json)."""
    (entry,) = [n for n in zipfile.ZipFile(log).namelist() if n.startswith("samples/")]
    return entry.removeprefix("samples/").rsplit("_epoch_", 1)[0]


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def in_frames(good: Path, dest: Path, frame: int = 1024) -> Path:
    """`good` with each entry in zstd frames of `frame` bytes, as Inspect writes an entry
    over 200 MiB (its frame cap), at a small scale."""
    cctx = zstandard.ZstdCompressor(level=3)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(dest, "w") as out:
        for info in src.infolist():
            plain = src.read(info)
            packed = b"".join(cctx.compress(plain[i : i + frame]) for i in range(0, len(plain), frame))
            entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            entry.compress_type, entry.CRC = 93, zlib.crc32(plain)
            entry.compress_size, entry.file_size = len(packed), len(plain)
            entry.header_offset = out.fp.tell()  # type: ignore[union-attr]
            out.fp.write(entry.FileHeader(False))  # type: ignore[union-attr]
            out.fp.write(packed)  # type: ignore[union-attr]
            out.filelist.append(entry)
            out.NameToInfo[entry.filename] = entry
            out.start_dir = out.fp.tell()  # type: ignore[union-attr]
            out._didModify = True  # type: ignore[attr-defined]
    return dest


def bomb(good: Path, dest: Path) -> Path:
    """`good` whose sample entry inflates to 100 MiB of one letter from a few KB."""
    with zipfile.ZipFile(good) as src, zipio.open_writer(str(dest)) as out:
        for name in src.namelist():
            data = src.read(name)
            if name.startswith("samples/"):
                data = data[:-1] + b',"x":"' + b"A" * (100 << 20) + b'"}'
            out.writestr(name, data)
    return dest


@pytest.mark.faults
def test_a_malformed_finished_log_never_counts_and_is_named(good_results: Path, tmp_path: Path):
    """A junk log is dead-lettered and named; a log in many zstd frames counts; a bomb is
    refused by the worker, whose next attempt counts; a log that reads in full but is always
    another job's is run again until the fleet gives up on it, saying what was wrong with it;
    no attempt leaves its log behind."""
    runs = tmp_path / "runs"
    logs = sorted(good_results.glob("*.evaljob"))
    junk = malformed_log(logs[0], tmp_path / "junk.eval")
    others = [p for p in logs if not any("web:fix_login" in n for n in zipfile.ZipFile(p).namelist())]
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    in_frames(others[0], overrides / f"{others[0].stem}.always")
    bomb(others[1], overrides / f"{others[1].stem}.first")
    (victim,) = [p for p in logs if p not in others and _sample_of(p) != "web:fix_login"]
    (overrides / f"{victim.stem}.always").write_bytes(others[0].read_bytes())
    # Every attempt also starts a process in a session of its own, which must go with it
    command = (
        f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >>{overrides}/setsid.pids; "
        f'o={overrides}/"$CT_JOB_ID"; if [ -e "$o".always ]; then cp "$o".always "$CT_OUTPUT"; '
        f'elif [ -e "$o".first ]; then mv "$o".first "$CT_OUTPUT"; '
        f"else {copy_command(good_results, junk, junk_for='web:fix_login')}; fi"
    )
    proc = start(
        runs,
        "--task-file",
        "smoke",
        *LOCAL,  # the job ids of good_results' run: the same task args
        "--command",
        command,
        "--ec2-arg",
        "max_receive_count=2",
        "--ec2-arg",
        "visibility_timeout=4",
        "--ec2-arg",
        "heartbeat_interval=2",
        *FAST,
        *ONE_WORKER,
    )
    code, out, err = finish(proc)
    assert code == 1, out + err
    assert "Traceback" not in out + err
    assert "2 job(s) missing from the merged run:" in err
    line = next(line for line in err.splitlines() if line.strip().startswith("web:fix_login epoch 1:"))
    assert "dead-lettered" in line and "does not read in full" in line and "bin/ct-fleet run-job" in line
    # max_receive_count=2: run twice more, then given up on the third, with what was wrong.
    gave_up = f"result of job {victim.stem} is not the job's: it holds sample"
    assert err.count(f"{gave_up}") == 3 and err.count("; running it again") >= 2, err
    assert re.search(re.escape(gave_up) + r".*, 3 times; giving up on it", err), err
    line = next(line for line in err.splitlines() if line.strip().startswith(f"{_sample_of(victim)} epoch 1:"))
    assert "is not the job's: it holds sample" in line and "3 times" in line, line
    pairs = merged_pairs(runs)
    assert len(pairs) == 2 and ("web:fix_login", 1) not in pairs and (_sample_of(victim), 1) not in pairs
    assert not list(overrides.glob("*.first"))  # the bomb was run, and refused: its job ran again
    assert "inflation bomb" in (fleet_dir(runs) / "attempts.jsonl").read_text()
    assert not list(fleet_dir(runs).glob("instances/*/var/lib/linuxbench/jobs/*.eval"))  # no attempt's log left
    started = [int(pid) for pid in (overrides / "setsid.pids").read_text().split()]
    assert len(started) >= 4 and not [pid for pid in started if psutil.pid_exists(pid) and not _zombie(pid)]
    assert_nothing_running(runs)


@pytest.mark.faults
def test_poisoned_queues_and_another_jobs_result_are_dropped_and_the_run_completes(good_results: Path, tmp_path: Path):
    """Anything holding the worker role can write to the queues and the bucket. Junk and
    forged reports on the done queue, junk on the work queue, and a result that reads in
    full but holds another sample: each is said, dropped, and never counts; the run ends
    complete, each (sample, epoch) once."""
    runs = tmp_path / "runs"
    logs = sorted(good_results.glob("*.evaljob"))
    victim_sample = "web:fix_login"
    # entry names say the sample: samples/{id}_epoch_{n}.json
    other = next(p for p in logs if not any(victim_sample in n for n in zipfile.ZipFile(p).namelist()))
    marks = tmp_path / "marks"
    marks.mkdir()
    # Another task's log of the same sample: its own log, but of other task arguments
    other_task = with_task_args(other, marks / f"{other.stem}.first", policy="attack")
    # The victim's first attempt writes another job's (valid) log; the next, its own; the
    # other's first attempt writes its sample's log of another task.
    command = (
        f'if [ -e {marks}/"$CT_JOB_ID".first ]; then mv {marks}/"$CT_JOB_ID".first "$CT_OUTPUT"; '
        f'elif [ "$CT_SAMPLE_ID" = {victim_sample} ] && [ ! -e {marks}/"$CT_JOB_ID" ]; then '
        f'touch {marks}/"$CT_JOB_ID"; cp {other} "$CT_OUTPUT"; else {copy_command(good_results)}; fi'
    )
    proc = start(
        runs, "--task-file", "smoke", *LOCAL, "--command", command, *FAST, *ONE_WORKER, CT_FLEET_PAUSE_AT="enqueue"
    )
    marker = paused_at(runs, "enqueue")
    run_dir = marker.parent
    fleet_id = run_dir.name
    assert_strangers_get_nothing(run_dir)
    sqs = embedded_client(run_dir, "sqs")
    names = queue_names(fleet_id)
    done_url = sqs.get_queue_url(QueueName=names["done"])["QueueUrl"]
    work_url = sqs.get_queue_url(QueueName=names["work"])["QueueUrl"]
    real_job = json.loads((run_dir / "manifest.json").read_text())["jobs"][0]["job_id"]
    report = {"type": "done", "instance_id": "i", "worker_id": "w", "outcome": "success"}
    forged = [
        {**report, "fleet_id": "000000000000", "job_id": real_job},  # another fleet's
        {**report, "fleet_id": fleet_id, "job_id": "nosuchjob"},  # no job of this fleet
    ]
    # a success no worker reported, five times, before the job ran: no result is stored
    forged_success = [json.dumps({**report, "fleet_id": fleet_id, "job_id": real_job})] * 5
    # spot notices of workers the fleet never launched: never a launch (max_workers is 1)
    beat = {"type": "heartbeat", "fleet_id": fleet_id, "worker_id": "w", "extra": {"spot_notice": True}}
    forged += [{**beat, "instance_id": f"i-forged{n}"} for n in range(6)]
    for body in [*BAD_REPORTS, *map(json.dumps, forged), *forged_success]:
        sqs.send_message(QueueUrl=done_url, MessageBody=body)
    for body in ("not json", "[]", json.dumps({"fleet_id": fleet_id, "job_id": 5}), "{" * 5000):
        sqs.send_message(QueueUrl=work_url, MessageBody=body)
    marker.unlink()
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert "not a report of this fleet was dropped" in err and "not JSON" in err
    dropped = int(re.search(r"messages not of this fleet dropped (\d+)", out).group(1))  # type: ignore[union-attr]
    # each forged success is dropped once its result is found missing, or counted a duplicate
    # while the first is checked: never a rerun, never a dead letter
    base = len(BAD_REPORTS) + len(forged)
    assert base + 1 <= dropped <= base + 5, out
    assert "is not the job's: it holds sample" in err and "running it again" in err
    assert not other_task.exists()  # it ran
    assert "spot notice" not in err and len(list(run_dir.glob("instances/*"))) == 1, err
    assert f"result of job {other.stem} is not the job's: it has task argument policy='attack'" in err
    assert "unreadable" not in err and not re.search(r"\b[1-9]\d* dead", out)
    pairs = merged_pairs(runs)
    assert len(pairs) == 4 and len(set(pairs)) == 4  # each (sample, epoch) once: nothing counted twice
    worker_log = "".join(p.read_text() for p in run_dir.glob("instances/*/var/log/linuxbench-bootstrap.log"))
    assert worker_log.count("dropped a work message that is not a job of this fleet") == 3  # then counted
    assert_nothing_running(runs)
    # `merge` (and `view`, which merges) read results too: another job's is left out, named
    (run_dir / "jobs" / f"{other.stem}.evaljob").write_bytes(other_task_log(other, tmp_path).read_bytes())
    merged = run_cli(["merge", str(run_dir)], env=env_for(runs))
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert f"is not the result of job {other.stem}: it has task argument policy='attack'" in merged.stderr
    assert len(merged_pairs(runs)) == 3
