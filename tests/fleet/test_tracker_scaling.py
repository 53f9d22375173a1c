"""The controller's pure decisions, without moto: job state from reports, when to launch."""

from __future__ import annotations

import pytest

from ct_fleet.controller.fleet import JobTracker
from ct_fleet.controller.fleet.scaling import Decision, decide
from ct_fleet.protocol import DoneMessage
from ct_fleet.protocol.sizing import first_launch_count
from testkit.messages import done


def test_success_is_fetched_then_final() -> None:
    t = JobTracker.of(["a", "b"])
    assert t.on_report(done("a", "success")) == "a"
    assert "a" not in t.final and t.remaining == 1  # being fetched: not left for workers
    t.fetched("a", ok=True)
    assert t.final == {"a": "success"} and list(t.job_seconds) == [2.5] and not t.complete


def test_duplicate_reports_never_count_twice() -> None:
    t = JobTracker.of(["a"])
    t.on_report(done("a", "success"))
    assert t.on_report(done("a", "success")) is None  # while fetching
    t.fetched("a", ok=True)
    assert t.on_report(done("a", "skipped_duplicate", receive_count=2)) is None
    assert t.duplicates == 2 and t.attempts == 3 and t.redeliveries == 1 and t.finished == 1


def test_retry_keeps_the_job_open_with_its_error() -> None:
    t = JobTracker.of(["a"])
    assert t.on_report(done("a", "retry", error_class="model_api", error="429")) is None
    assert t.final == {} and t.last_error["a"] == ("model_api", "429") and t.remaining == 1


def test_failed_is_final_without_a_result() -> None:
    t = JobTracker.of(["a"])
    t.on_report(done("a", "failed", error_class="timeout", error="killed"))
    assert t.final == {"a": "failed"} and t.failed == 1 and t.complete


def test_sample_error_is_final_with_its_result() -> None:
    t = JobTracker.of(["a"])
    assert t.on_report(done("a", "sample_error", error="boom")) == "a"
    t.fetched("a", ok=True)
    assert t.final == {"a": "sample_error"} and t.last_error["a"] == ("task_error", "boom")


def test_unreadable_result_leaves_the_job_to_run_again() -> None:
    t = JobTracker.of(["a"])
    t.on_report(done("a", "success"))
    t.fetched("a", ok=False)
    assert t.final == {} and t.fetching == set() and t.remaining == 1


def test_dead_letter_keeps_the_last_error_and_ends_the_job() -> None:
    t = JobTracker.of(["a", "b"])
    t.on_report(done("a", "retry", error_class="infra", error="exit 1"))
    t.dead_lettered("a")
    t.dead_lettered("b")
    assert t.dead == {"a": ("infra", "exit 1"), "b": ("infra", "no error reported")} and t.complete


def test_redelivered_job_that_finished_is_not_dead() -> None:
    t = JobTracker.of(["a"])
    t.on_report(done("a", "success", receive_count=2))
    t.fetched("a", ok=True)
    t.dead_lettered("a")
    assert t.dead == {} and t.final == {"a": "success"} and t.redeliveries == 1


def test_reports_of_other_fleets_jobs_and_heartbeats_are_ignored() -> None:
    t = JobTracker.of(["a"])
    assert t.on_report(done("zzz", "success")) is None
    assert t.on_report(DoneMessage(type="heartbeat", fleet_id="f", instance_id="i", worker_id="w", load=0.5)) is None
    assert t.attempts == 0


def test_resumed_jobs_are_final() -> None:
    t = JobTracker.of(["a", "b"])
    t.resumed(["a"])
    assert t.final == {"a": "success"} and t.remaining == 1


@pytest.mark.parametrize(
    ("pending", "max_workers", "per_worker", "expected"),
    [
        (1, 24, 20, 1),
        (10, 24, 20, 1),
        (11, 24, 20, 2),
        (1000, 24, 20, 24),
        (1000, 5, 20, 5),
        (7, 24, 2, 4),
        (0, 24, 20, 1),
    ],
)
def test_first_launch(pending: int, max_workers: int, per_worker: int, expected: int) -> None:
    assert first_launch_count(pending, max_workers=max_workers, concurrency_per_worker=per_worker) == expected


BASE = dict(
    remaining=100,
    waiting=50,
    live=5,
    replacements=0,
    max_replacements=3,
    max_workers=10,
    concurrency_per_worker=10,
    fresh_loads=[],
    cooled=True,
)


def test_nothing_left_launches_nothing() -> None:
    assert decide(**{**BASE, "remaining": 0, "live": 0}) == Decision("none")


def test_dead_workers_are_replaced_up_to_the_cap() -> None:
    assert decide(**{**BASE, "live": 7}) == Decision("replace", 3)  # wanted 10
    assert decide(**{**BASE, "live": 2, "replacements": 2}) == Decision("replace", 1)


def test_no_replacements_left_gives_up_only_when_no_worker_is_up() -> None:
    assert decide(**{**BASE, "live": 2, "replacements": 3}) == Decision("none")
    assert decide(**{**BASE, "live": 0, "replacements": 3}) == Decision("give_up")


def test_scale_up_while_cpu_bound_and_cooled_down() -> None:
    full = {**BASE, "remaining": 50, "live": 5, "max_workers": 20}  # wanted 5: no replacement
    assert decide(**{**full, "fresh_loads": [0.9, 0.95]}) == Decision("scale_up", 1)
    assert decide(**{**full, "fresh_loads": [0.5, 0.6]}) == Decision("none")
    assert decide(**{**full, "fresh_loads": [0.9], "cooled": False}) == Decision("none")
    assert decide(**{**full, "fresh_loads": []}) == Decision("none")


def test_scale_up_stops_at_max_workers_and_without_waiting_work() -> None:
    full = {**BASE, "remaining": 50, "live": 5, "max_workers": 5, "fresh_loads": [1.0]}
    assert decide(**full) == Decision("none")
    assert decide(**{**full, "max_workers": 20, "waiting": 0}) == Decision("none")


def test_done_reports_are_let_pile_up_except_at_the_end_of_the_run():
    from ct_fleet.controller.fleet.tracking import DONE_POLL_PAUSE, pause_after
    from ct_fleet.services.queues import BATCH

    assert pause_after(received=3, remaining=500) == DONE_POLL_PAUSE  # drained: let reports pile up
    assert pause_after(received=BATCH, remaining=500) == 0  # a full batch: more are waiting
    # One batch would hold what is left: each report may be the last, and waits for nothing.
    assert pause_after(received=3, remaining=BATCH) == 0
    assert pause_after(received=0, remaining=1) == 0


def test_no_scale_up_while_the_model_api_is_the_limit_and_no_more_workers_than_hold_the_budget() -> None:
    full = {**BASE, "remaining": 50, "live": 5, "max_workers": 20, "fresh_loads": [0.9, 0.95]}
    assert decide(**full) == Decision("scale_up", 1)
    assert decide(**{**full, "model_bound": True}) == Decision("none")
    # a budget of 20 requests at 10 slots a worker: 2 workers hold it, 5 are up
    assert decide(**{**BASE, "live": 1, "budget_workers": 2}) == Decision("replace", 1)
    assert decide(**{**BASE, "live": 2, "budget_workers": 2, "fresh_loads": [1.0]}) == Decision("none")


def test_the_limit_the_fleet_is_at() -> None:
    from ct_fleet.controller.fleet.scaling import LimitClock, limit_of

    busy = [0.9, 0.95]
    assert limit_of(0, 5, 10, None, None, True, busy) == ""  # nothing waits
    assert limit_of(9, 5, 10, None, None, True, busy) == "model API"
    assert limit_of(9, 5, 10, None, "the vCPU quota L-34B43A08 refused", False, busy) == "quota"
    assert limit_of(9, 5, 10, None, "no capacity in us-east-1a", False, busy) == "capacity"
    assert limit_of(9, 10, 10, None, None, False, busy) == "max_workers"
    assert limit_of(9, 10, 10, "clamped by L-34B43A08", None, False, busy) == "quota"
    assert limit_of(9, 5, 10, None, None, False, busy) == "CPU"
    assert limit_of(9, 5, 10, None, None, False, [0.2]) == ""
    clock = LimitClock()
    clock.at("CPU", 0.0)
    clock.at("model API", 10.0)
    clock.at("", 25.0)
    clock.at("CPU", 30.0)
    clock.at("CPU", 31.0)
    assert clock.seconds == {"CPU": 11.0, "model API": 15.0}


def test_a_retried_job_is_one_that_comes_back_until_it_ends() -> None:
    t = JobTracker.of(["a", "b"])
    t.on_report(done("a", "retry", error_class="model_api"))
    assert t.retrying == {"a"}
    t.on_report(done("a", "success", receive_count=2))
    assert t.retrying == set()
    t.on_report(done("b", "success"))
    t.fetched("b", ok=False)  # an unreadable result: sent again
    assert t.retrying == {"b"}
