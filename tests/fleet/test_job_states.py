"""The job state machine (controller/tracker.py): every job is in exactly one state, a
result beats a dead letter or a failure, duplicates never count twice, and the run is
complete only when every job is finished or dead."""

from __future__ import annotations

import random

import pytest

from ct_fleet.controller.fleet import JobTracker
from ct_fleet.protocol import DoneMessage
from testkit.messages import done


def report(job_id: str, outcome: str, receive_count: int = 1) -> DoneMessage:
    error_class = "infra" if outcome in ("retry", "failed") else None
    return done(job_id, outcome, receive_count=receive_count, error_class=error_class, error=f"{outcome} error")


def apply(t: JobTracker, event: tuple[str, ...]) -> None:
    kind, job_id = event[0], event[1]
    if kind == "report":
        fetch = t.on_report(report(job_id, event[2]))
        if fetch is not None:
            assert t.state[fetch] == "running"
    elif kind == "fetched":
        t.fetched(job_id, ok=event[2] == "ok")
    elif kind == "dlq":
        t.dead_lettered(job_id)
    t.check()


@pytest.mark.parametrize(
    "events,state,outcome",
    [
        # the visibility_timeout=0 story: two workers run the same job, a copy is dead-lettered
        (
            [("report", "a", "success"), ("dlq", "a"), ("report", "a", "success"), ("fetched", "a", "ok")],
            "finished",
            "success",
        ),
        ([("dlq", "a"), ("report", "a", "success"), ("fetched", "a", "ok")], "finished", "success"),  # late success
        ([("report", "a", "retry"), ("report", "a", "retry"), ("dlq", "a")], "dead", None),
        ([("report", "a", "failed"), ("report", "a", "success"), ("fetched", "a", "ok")], "finished", "success"),
        ([("report", "a", "success"), ("fetched", "a", "bad")], "pending", None),  # unreadable: run again
        ([("report", "a", "success"), ("fetched", "a", "bad"), ("dlq", "a")], "dead", None),
        ([("report", "a", "success"), ("fetched", "a", "ok"), ("report", "a", "failed")], "finished", "success"),
        ([("report", "a", "success"), ("fetched", "a", "ok"), ("dlq", "a")], "finished", "success"),
        ([("report", "a", "sample_error"), ("fetched", "a", "ok")], "finished", "sample_error"),
        ([("report", "a", "retry"), ("report", "a", "success"), ("fetched", "a", "ok")], "finished", "success"),
        ([("report", "a", "skipped_duplicate"), ("fetched", "a", "ok")], "finished", "success"),
        ([("fetched", "a", "ok")], "pending", None),  # a fetch nobody asked for changes nothing
    ],
)
def test_transitions(events, state: str, outcome: str | None):
    t = JobTracker.of(["a", "b"])
    for event in events:
        apply(t, event)
    assert t.state["a"] == state
    assert t.final.get("a") == outcome
    assert ("a" in t.dead) == (state == "dead")
    assert t.state["b"] == "pending" and not t.complete


def test_a_late_success_is_reported_as_such_and_leaves_the_dead_table():
    t = JobTracker.of(["a"])
    t.on_report(report("a", "retry"))
    t.dead_lettered("a")
    assert t.dead and t.complete
    assert t.on_report(report("a", "success", receive_count=3)) == "a"
    assert not t.complete  # the result must be fetched and verified first
    t.fetched("a", ok=True)
    assert t.late_successes == {"a"} and t.dead == {} and t.final == {"a": "success"} and t.complete


def test_duplicates_never_count_twice():
    t = JobTracker.of(["a", "b"])
    for _ in range(3):
        t.on_report(report("a", "success", receive_count=2))
        t.dead_lettered("a")
    t.fetched("a", ok=True)
    t.fetched("a", ok=True)
    assert (
        t.finished == 1 and t.final == {"a": "success"} and t.duplicates >= 4 and list(t.job_seconds) == [2.5]
    )  # once, from 10.0 to 12.5
    assert not t.complete  # b is still pending: the loop goes on


def test_a_result_found_unreadable_before_the_merge_sends_the_job_back():
    t = JobTracker.of(["a"])
    t.on_report(report("a", "success"))
    t.fetched("a", ok=True)
    t.unverified("a")
    assert t.state["a"] == "pending" and not t.complete and t.final == {}
    t.check()


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_keep_the_invariants(seed: int):
    """Reports, fetches and dead letters in any order and number (at-least-once delivery)."""
    rng = random.Random(seed)
    jobs = [f"j{i}" for i in range(5)]
    t = JobTracker.of(jobs)
    verified: set[str] = set()
    for _ in range(rng.randint(5, 60)):
        job = rng.choice(jobs)
        kind = rng.choice(["report", "report", "fetched", "dlq"])
        if kind == "report":
            event: tuple[str, ...] = (
                "report",
                job,
                rng.choice(["success", "sample_error", "retry", "failed", "skipped_duplicate"]),
            )
        elif kind == "fetched":
            event = ("fetched", job, rng.choice(["ok", "ok", "bad"]))
        else:
            event = ("dlq", job)
        was_running = t.state[job] == "running"
        apply(t, event)
        if kind == "fetched" and event[2] == "ok" and was_running:
            verified.add(job)
        assert t.finished <= len(jobs)
        assert t.complete == all(t.state[j] in ("finished", "dead") for j in jobs)
        for j in verified:  # once verified, a result is never lost to a dead letter or a failure
            assert t.state[j] == "finished" and t.final[j] in ("success", "sample_error")
