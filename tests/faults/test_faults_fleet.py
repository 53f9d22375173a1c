"""The fleet's own resources under attack: a queue or the manifest deleted mid-run, the
same command twice at once, a second controller for the same fleet, a corrupt manifest in S3. The run must stop (or
refuse) with a one-line reason instead of hanging, and leave nothing running."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from testkit.fleet import (
    FAST,
    LOCAL,
    ONE_WORKER,
    assert_nothing_running,
    ec2_account,
    embedded_client,
    finish,
    fleet_instances,
    fleet_secrets_left,
    paused_at,
    start,
    start_ec2,
    wait_for,
)

SLOW = ["--policy", "tests.testkit.fault_policies:slow"]


@pytest.mark.faults
@pytest.mark.parametrize("what", ["work", "done", "manifest"])
def test_a_deleted_queue_or_manifest_stops_the_run_with_its_reason(tmp_path: Path, what: str):
    runs = tmp_path / "runs"
    args = ["--task-file", "smoke", *SLOW, *FAST, *LOCAL, *ONE_WORKER]
    proc = start(runs, *args, CT_FAULT_SLEEP="20", CT_FLEET_PAUSE_AT="tracking")
    marker = paused_at(runs, "tracking")
    run_dir, fleet_id = marker.parent, marker.parent.name
    if what == "work":
        # The same command again meanwhile: refused, and the first run goes on as it was.
        code, out, err = finish(start(runs, *args, CT_FAULT_SLEEP="20"), timeout=120)
        assert code == 2, out + err
        assert f"fleet {fleet_id} is already being run by ct-fleet pid {proc.pid} on this machine" in err
        assert len(err.strip().splitlines()) <= 3
    if what == "manifest":
        embedded_client(run_dir, "s3").delete_object(
            Bucket="lb-fleet-results-migrated", Key=f"{fleet_id}/manifest.json"
        )
        reason = f"the fleet manifest s3://lb-fleet-results-migrated/{fleet_id}/manifest.json was deleted"
    else:
        sqs = embedded_client(run_dir, "sqs")
        sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=f"lb-fleet-{fleet_id}-{what}")["QueueUrl"])
        reason = f"the {what} queue lb-fleet-{fleet_id}-{what} was deleted"
    marker.unlink()
    code, out, err = finish(proc, timeout=180)  # not toward the hours of the hard timeouts
    assert code == 1, out + err
    assert f"{reason}: the fleet cannot progress; fleet terminated" in err
    assert "Traceback" not in out + err
    assert_nothing_running(runs)


@pytest.fixture(scope="module")
def account(moto_server, tmp_path_factory: pytest.TempPathFactory):
    return ec2_account(moto_server.endpoint_url, tmp_path_factory.mktemp("acct"), "GH_TOKEN=gh-canary\n")


def other_machine(account, tmp_path: Path, name: str):
    runs = tmp_path / name
    runs.mkdir()
    (runs / ".env").write_text((account["runs"] / ".env").read_text())
    return {**account, "runs": runs}


@pytest.mark.faults
def test_a_second_controller_elsewhere_is_refused_then_adopts_once_the_first_is_gone(account, tmp_path: Path):
    one, two = other_machine(account, tmp_path, "laptop"), other_machine(account, tmp_path, "desktop")
    # The worker must outlive the first controller for the third to adopt it: its one job is
    # done long before, so it waits idle (the end-of-run signal, not this, ends it).
    args = ["-e", "ops", "-t", "enable_tls", *LOCAL, "--ec2-arg", "max_workers=1", "--ec2-arg", "idle_timeout=900"]
    first = start_ec2(one, *args, CT_FLEET_PAUSE_AT="tracking")
    marker = paused_at(one["runs"], "tracking")
    fleet_id = marker.parent.name
    second = start_ec2(two, *args)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 2, out + err
    assert f"fleet {fleet_id} is driven by another controller (pid {first.pid}" in err
    assert fleet_instances(account, fleet_id) and fleet_secrets_left(account, fleet_id)  # left alone
    first.send_signal(signal.SIGKILL)  # gone without teardown or releasing its lease
    first.communicate()
    third = start_ec2(two, *args)
    out, err = third.communicate(timeout=400)
    assert third.returncode == 0, out + err
    assert "adopting the running fleet" in err
    assert fleet_secrets_left(account, fleet_id) == []
    wait_for(lambda: not fleet_instances(account, fleet_id), timeout=60)


@pytest.mark.faults
def test_a_corrupt_manifest_in_s3_does_not_block_the_resume(account, tmp_path: Path):
    machine = other_machine(account, tmp_path, "m")
    args = ["-e", "web", "-t", "fix_login", "-s", "add_backdoor", *LOCAL, "--ec2-arg", "idle_timeout=3"]
    proc = start_ec2(machine, *args)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, out + err
    (run_dir,) = [p for p in machine["runs"].iterdir() if p.is_dir()]
    s3 = account["client"]("s3")
    s3.put_object(Bucket=account["bucket"], Key=f"{run_dir.name}/manifest.json", Body=b'{"schema": 99, "junk": ')
    again = start_ec2(machine, *args)
    out, err = again.communicate(timeout=400)
    assert again.returncode == 0, out + err
    assert "manifest in S3 is unreadable" in err
    assert "1 jobs (1 already done)" in " ".join(out.split())
    body = s3.get_object(Bucket=account["bucket"], Key=f"{run_dir.name}/manifest.json")["Body"].read()
    from ct_fleet.protocol import Manifest

    assert Manifest.from_json(body).fleet_id == run_dir.name  # written anew


@pytest.mark.faults
def test_jobs_handed_out_twice_count_once_and_are_never_dead(account, tmp_path: Path):
    """The visibility_timeout=0 story without the bad knob: every visibility extension fails,
    so running jobs reappear on the queue, run twice, and copies reach the dead-letter queue
    after the job succeeded. Each job must count once, as finished, and the dead table stay empty."""

    from testkit.faultproxy import spawn_proxy

    machine = other_machine(account, tmp_path, "m")
    with spawn_proxy(account["kw"]["endpoint_url"], rules=["sqs:ChangeMessageVisibility*:5xx:before:1.0"]) as proxy:
        through = {**machine, "kw": {**machine["kw"], "endpoint_url": proxy.endpoint_url}}
        proc = start_ec2(
            through,
            "--task-file",
            "smoke",
            *SLOW,
            *LOCAL,
            *ONE_WORKER,
            "--ec2-arg",
            "new_fleet=true",
            "--ec2-arg",
            "visibility_timeout=4",
            "--ec2-arg",
            "heartbeat_interval=2",
            "--ec2-arg",
            # A copy goes to the dead-letter queue after 10 receives (~40 s): past the first
            # attempt's success (6 s + a cold start, which took over 12 s on a loaded machine
            # when this was 3), yet within the run, so late copies can still reach it.
            "max_receive_count=10",
            "--ec2-arg",
            "idle_timeout=3",
            "--ec2-arg",
            "retry_backoff=1",
            CT_FAULT_SLEEP="6",
        )
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    text = " ".join(out.split())
    # A copy may reach the dead-letter queue before or after its job's success; either way
    # the success counts and no job is reported dead or missing.
    assert "jobs without a result" not in text and "missing from the merged run" not in text + err
    (run_dir,) = [p for p in machine["runs"].iterdir() if p.is_dir() and (p / "merged").exists()]
    # Jobs really were handed out twice: a second copy reported (a redelivery), or, when every
    # first copy ended first, second copies were still running at the end of the run and
    # were dropped (the worker's log, which the run keeps).
    worker_logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*-bootstrap.log"))
    redeliveries = int(text.split("redeliveries ")[1].split(",")[0])
    assert redeliveries >= 1 or "dropped at the end of the run" in worker_logs, worker_logs[-3000:]
    from inspect_ai.log import read_eval_log

    (merged,) = (run_dir / "merged").glob("*.eval")
    pairs = [(s.id, s.epoch) for s in read_eval_log(str(merged)).samples or []]
    assert len(pairs) == 4 and len(set(pairs)) == 4
