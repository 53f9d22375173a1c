"""The longest first, without a fleet: expected durations from earlier runs' records (the
same task identity, any model), a rerun's own first attempt first, the median for samples
with no history, the plan's order with none at all."""

from __future__ import annotations

import json
from pathlib import Path

from ct_fleet.controller.planning import FleetSpec, FleetTask
from ct_fleet.controller.planning.history import ORDER, longest_first, record_sample_seconds
from ct_fleet.controller.planning.jobs import make_jobs
from ct_fleet.protocol import Ec2Config, run_layout


def task(model: str) -> FleetTask:
    return FleetTask(
        name="t", task_spec="t.py@t", task_root="code", task_args={"n": 5}, sample_ids=[1, 2, 3, 4, 5], model=model
    )


def fleet(runs: Path, name: str, model: str, seconds: dict[int, float], *, record: bool = True):
    """A run directory holding a manifest and finished attempts of the given durations."""
    t = task(model)
    jobs = make_jobs([t], 1, code_sha="abc", model_args={})
    spec = FleetSpec(fleet_id=name, tasks=[t], jobs=jobs, model=model, epochs=1, code_sha="abc", config=Ec2Config())
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    (run_dir / run_layout.MANIFEST).write_text(spec.manifest().to_json())
    with open(run_dir / run_layout.ATTEMPTS, "w") as fh:
        for job in jobs:
            if job.sample_id in seconds:
                row = {"task": t.key, "sample_id": job.sample_id, "epoch": job.epoch, "outcome": "success"}
                fh.write(json.dumps({**row, "started_at": 100.0, "finished_at": 100.0 + seconds[job.sample_id]}) + "\n")
    if record:
        record_sample_seconds(run_dir)
    return t, jobs, run_dir


def order(jobs) -> list[int]:
    return [j.sample_id for j in jobs]


def test_no_history_keeps_the_plan_order(tmp_path: Path):
    t, jobs, run_dir = fleet(tmp_path, "new", "m/a", {})
    assert order(longest_first(run_dir, [t], jobs)) == [1, 2, 3, 4, 5]
    assert not (run_dir / ORDER).exists()


def test_an_earlier_run_of_the_same_task_with_another_model_orders_the_queue(tmp_path: Path):
    fleet(tmp_path, "old", "m/b", {1: 1.0, 2: 30.0, 3: 2.0, 4: 10.0})  # no history of sample 5
    t, jobs, run_dir = fleet(tmp_path, "new", "m/a", {})
    # 5 goes by the median of the others (6.0): between 4 (10 s) and 3 (2 s)
    assert order(longest_first(run_dir, [t], jobs)) == [2, 4, 5, 3, 1]
    predicted = json.loads((run_dir / ORDER).read_text())
    assert [row[1:] for row in predicted] == [[30.0, True], [10.0, True], [6.0, False], [2.0, True], [1.0, True]]


def test_a_rerun_uses_its_own_first_attempt_over_other_runs(tmp_path: Path):
    fleet(tmp_path, "old", "m/a", {1: 50.0, 2: 1.0})
    # the interrupted first attempt of this fleet wrote no sample-seconds.json: its attempts count
    t, jobs, run_dir = fleet(tmp_path, "new", "m/a", {1: 2.0, 2: 40.0}, record=False)
    assert order(longest_first(run_dir, [t], jobs))[:1] == [2]


def test_another_task_identity_is_no_history(tmp_path: Path):
    fleet(tmp_path, "old", "m/a", {1: 1.0, 5: 30.0})
    other = FleetTask(
        name="t", task_spec="t.py@t", task_root="code", task_args={"n": 6}, sample_ids=[1, 2, 3, 4, 5], model="m/a"
    )
    jobs = make_jobs([other], 1, code_sha="abc", model_args={})
    (tmp_path / "new").mkdir()
    assert order(longest_first(tmp_path / "new", [other], jobs)) == [1, 2, 3, 4, 5]


def test_each_epoch_goes_by_its_own_history_else_by_its_samples(tmp_path: Path):
    old = task("m/b")
    jobs = make_jobs([old], 2, code_sha="abc", model_args={})
    spec = FleetSpec(fleet_id="old", tasks=[old], jobs=jobs, model="m/b", epochs=2, code_sha="abc", config=Ec2Config())
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / run_layout.MANIFEST).write_text(spec.manifest().to_json())
    took = {(1, 1): 1.0, (1, 2): 20.0, (2, 1): 5.0}  # sample 2's epoch 2 not seen: 5.0 from epoch 1
    with open(tmp_path / "old" / run_layout.ATTEMPTS, "w") as fh:
        for (sample, epoch), seconds in took.items():
            row = {"task": old.key, "sample_id": sample, "epoch": epoch, "outcome": "success"}
            fh.write(json.dumps({**row, "started_at": 0.0, "finished_at": seconds}) + "\n")
    record_sample_seconds(tmp_path / "old")
    new = task("m/a")
    (tmp_path / "new").mkdir()
    ordered = longest_first(tmp_path / "new", [new], make_jobs([new], 2, code_sha="abc", model_args={}))
    order = [(j.sample_id, j.epoch) for j in ordered]
    # 20 s first, 1 s last; sample 2's epochs (5 s) tie with the median (5 s) of samples 3-5
    assert order[0] == (1, 2) and order[-1] == (1, 1) and order[1:3] == [(2, 1), (2, 2)]


def test_the_report_sets_the_prediction_against_what_ran(tmp_path: Path):
    from ct_fleet.controller.reporting.run_report import Bar, predicted_order

    (tmp_path / run_layout.ORDER).write_text(json.dumps([["a", 30.0, True], ["b", 6.0, False], ["c", 2.0, True]]))

    def bar(job_id: str, start: float, end: float, outcome: str = "success") -> Bar:
        return Bar(
            job_id=job_id,
            task="t",
            sample_id=job_id,
            epoch=1,
            instance_id="i",
            lane=0,
            start=start,
            end=end,
            outcome=outcome,
            attempt=1,
        )

    bars = [bar("b", 0.0, 1.0, "retry"), bar("a", 0.5, 28.0), bar("c", 0.1, 3.0), bar("b", 2.0, 9.0)]
    rows = predicted_order(tmp_path, bars)
    assert [(r.job_id, r.queue_rank, r.start_rank, r.predicted, r.actual) for r in rows] == [
        ("a", 0, 1, 30.0, 27.5),
        ("b", 1, 2, 6.0, 7.0),
        ("c", 2, 0, 2.0, 2.9),
    ]


def test_fleets_of_other_machines_order_an_ec2_run_through_s3(aws_env: dict[str, str], tmp_path: Path):
    """history/{identity}.json in the bucket: merged into at a run's end, read at the next's start."""
    from ct_fleet.controller.planning import identities, seconds_of_run
    from ct_fleet.services import history, session, store

    session.reset()
    s3 = session.client("s3")
    store.ensure_bucket(s3, "history-test", create=True)
    t, _, old_dir = fleet(tmp_path / "elsewhere", "old", "m/b", {1: 1.0, 2: 30.0, 3: 2.0})
    history.merge(s3, "history-test", seconds_of_run(old_dir))
    history.merge(s3, "history-test", {identities([t])[0]: {"4#1": 10.0}})  # a later run adds, keeps the rest
    s3.put_object(Bucket="history-test", Key=history.key("junk"), Body=b"[1, 2]")
    assert history.get(s3, "history-test", "junk") == {} and history.get(s3, "history-test", "none") == {}
    new, jobs, run_dir = fleet(tmp_path / "here", "new", "m/a", {})
    remote = {i: history.get(s3, "history-test", i) for i in identities([new])}
    assert order(longest_first(run_dir, [new], jobs, remote)) == [2, 4, 5, 3, 1]
