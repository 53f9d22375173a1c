"""Anything holding the worker role can put messages on the fleet's queues. What is not a
report or a job of this fleet is counted, said (the first few), and dropped: it never
crashes the controller or a worker, never holds a worker's slot, never counts for a job
(a fleet with poisoned queues: tests/faults/test_faults_results.py). A hand-edited manifest is
bad input.
"""

from __future__ import annotations

import json

import pytest

from ct_fleet.protocol import BadMessage, DoneMessage, WorkMessage, decode_reports, encode_reports
from testkit.fleet import BAD_REPORTS

# The junk bodies, and one nested too deeply for a JSON parser
BAD_BODIES = [*BAD_REPORTS, "[" * 100_000]


@pytest.mark.parametrize("body", BAD_BODIES)
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
