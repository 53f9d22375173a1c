"""Anything holding the worker role can put messages on the fleet's queues. What is not a
report or a job of this fleet is counted, said (the first few), and dropped: it never
crashes the controller or a worker, never holds a worker's slot, never counts for a job.
"""

from __future__ import annotations

import json
import re

import boto3
import pytest

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY
from ct_fleet.protocol import BadMessage, DoneMessage, WorkMessage, decode_reports, encode_reports, queue_names
from fleet_helpers import FAST, LOCAL, ONE_WORKER, assert_nothing_running, finish, merged_pairs, start, wait_for

# The shapes an adversarial pass sent to the done queue (each crashed the controller once).
BAD_REPORTS = [
    "not json",
    "[]",
    "5",
    '"x"',
    '{"type": "batch", "reports": "abc"}',
    '{"type": "batch", "reports": [1]}',
    '{"type": "batch", "reports": null}',
    '{"type": "done"}',
    '{"type": "done", "fleet_id": "f", "instance_id": "i", "worker_id": "w", "job_id": 7, "outcome": "success"}',
    '{"type": "done", "fleet_id": "f", "instance_id": "i", "worker_id": "w", "receive_count": "many"}',
    "[" * 100_000,
]


@pytest.mark.parametrize("body", BAD_REPORTS)
def test_a_done_queue_body_that_is_not_a_report_is_named_not_raised(body: str):
    reports, problems = decode_reports(body)
    assert reports == [] and len(problems) == 1 and problems[0]


def test_a_bad_part_of_a_batch_does_not_hide_the_good_ones():
    good = DoneMessage(type="done", fleet_id="f", instance_id="i", worker_id="w", job_id="j", outcome="success")
    (body,) = encode_reports([good])
    batch = json.loads(body)
    batch["reports"].insert(0, {"type": "done", "job_id": ["not", "a", "string"]})
    reports, problems = decode_reports(json.dumps(batch))
    assert reports == [good] and len(problems) == 1


@pytest.mark.parametrize("body", ["", "null", "{}", '{"fleet_id": "f", "job_id": 1}', "{" * 5000])
def test_a_work_queue_body_that_is_not_a_job_raises_bad_message(body: str):
    with pytest.raises(BadMessage):
        WorkMessage.from_json(body)


def _sqs(run_dir):
    port = (run_dir / "moto.port").read_text().strip()
    return boto3.client(
        "sqs",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=EMBEDDED_ACCESS_KEY,
        aws_secret_access_key=EMBEDDED_SECRET_KEY,
    )


@pytest.mark.faults
def test_poisoned_queues_are_dropped_and_the_run_completes(tmp_path):
    runs = tmp_path / "runs"
    proc = start(runs, "--task-file", "smoke", *LOCAL, *FAST, *ONE_WORKER, CT_FLEET_PAUSE_AT="enqueue")
    marker = wait_for(lambda: next(iter(runs.glob("*/paused-at-enqueue")), None), timeout=300)
    run_dir = marker.parent
    fleet_id = run_dir.name
    names = queue_names(fleet_id)
    sqs = _sqs(run_dir)
    done_url = sqs.get_queue_url(QueueName=names["done"])["QueueUrl"]
    work_url = sqs.get_queue_url(QueueName=names["work"])["QueueUrl"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    real_job = manifest["jobs"][0]["job_id"]
    forged = [
        # well-formed, but not this fleet's: another fleet, an unknown job
        {
            "type": "done",
            "fleet_id": "000000000000",
            "instance_id": "i",
            "worker_id": "w",
            "job_id": real_job,
            "outcome": "success",
        },
        {
            "type": "done",
            "fleet_id": fleet_id,
            "instance_id": "i",
            "worker_id": "w",
            "job_id": "nosuchjob",
            "outcome": "success",
        },
    ]
    # a success no worker reported, five times, before the job ever ran: no result is stored
    success = {"type": "done", "fleet_id": fleet_id, "instance_id": "i", "worker_id": "w", "job_id": real_job}
    forged_success = [json.dumps({**success, "outcome": "success"})] * 5
    for body in [*BAD_REPORTS[:-1], *(json.dumps(f) for f in forged), *forged_success]:
        sqs.send_message(QueueUrl=done_url, MessageBody=body)
    job = json.loads(json.dumps(manifest["jobs"][0]))
    for body in (
        "not json",
        "[]",
        json.dumps({"fleet_id": fleet_id, "job_id": 5}),
        json.dumps({**job, "fleet_id": "other"}),
    ):
        sqs.send_message(QueueUrl=work_url, MessageBody=body)
    marker.unlink()
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert "not a report of this fleet was dropped" in err and "not JSON" in err
    dropped = int(re.search(r"messages not of this fleet dropped (\d+)", out).group(1))  # type: ignore[union-attr]
    # each forged success is dropped once its result is found missing, or counted a duplicate
    # while the first is checked: never a rerun, never a dead letter
    assert len(BAD_REPORTS) - 1 + len(forged) + 1 <= dropped <= len(BAD_REPORTS) - 1 + len(forged) + 5
    assert "unreadable" not in err and not re.search(r"\b[1-9]\d* dead", out)
    pairs = merged_pairs(runs)
    assert len(pairs) == 4 and len(set(pairs)) == 4
    logs = "".join(p.read_text() for p in run_dir.glob("instances/*/var/log/linuxbench-bootstrap.log"))
    assert logs.count("dropped a work message that is not a job of this fleet") == 3  # the 4th said no more
    assert_nothing_running(runs)


def _manifest_dir(tmp_path, **changes):
    from ct_fleet.protocol import Manifest, ManifestJob, ManifestTask

    task = ManifestTask(key="k", name="t", task_spec="t.py@t", task_args={}, sample_ids=[1])
    manifest = Manifest(
        fleet_id="abcdef012345", model="m/x", epochs=1, code_sha="x", tasks=[task], jobs=[ManifestJob("j", "k", 1, 1)]
    )
    data = {**json.loads(manifest.to_json()), **changes}
    run_dir = tmp_path / "runs" / "abcdef012345"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps(data))
    (run_dir / "moto.log").touch()  # a fleet of the embedded cloud: status reads its run directory
    return run_dir


@pytest.mark.parametrize(
    "changes,said",
    [
        ({"tasks": []}, "no tasks"),
        ({"jobs": [{"job_id": "j", "task": "nosuch", "sample_id": 1, "epoch": 1}]}, "names no task of the fleet"),
        ({"epochs": "many"}, "epochs"),
        ({"jobs": "abc"}, "jobs"),
        ({"tasks": [{"key": 1}]}, "tasks"),
    ],
)
@pytest.mark.parametrize("command", ["status", "merge"])
def test_a_hand_edited_manifest_is_one_line_and_exit_2(tmp_path, changes, said, command):
    from click.testing import CliRunner

    from ct_fleet.cli.main import cli

    run_dir = _manifest_dir(tmp_path, **changes)
    args = [command, str(run_dir) if command == "merge" else run_dir.name]
    result = CliRunner().invoke(cli, args, env={"CT_FLEET_RUNS": str(run_dir.parent)})
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "malformed fleet manifest" in lines[0] and said in lines[0] and "a bug" not in lines[0]


def test_a_manifest_number_written_as_text_still_reads(tmp_path):
    from ct_fleet.protocol import Manifest

    run_dir = _manifest_dir(tmp_path, epochs="3")
    assert Manifest.from_json((run_dir / "manifest.json").read_text()).epochs == 3
