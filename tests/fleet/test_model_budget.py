"""The fleet-wide model budget without a fleet: its division among workers, the hand-over
when workers come and go, the adaptive total, and the worker's side of it."""

from __future__ import annotations

import threading

import pytest

from ct_fleet.connections import ConnectionBudget, budget_keys, check_shared, connection_budget, one_connection
from ct_fleet.controller.fleet.budget import FleetBudget, divide, even_split
from ct_fleet.errors import BadInput
from ct_fleet.protocol import DoneMessage, knob_parsing
from ct_fleet.protocol.budget import BUDGET_REPORT, RATE_LIMITED, Budget
from ct_fleet.worker.budget import WorkerBudget
from testkit.fleet import wait_for

M = "openai/m"


def word(instance: str, *, v: int | None = None, held: int = 0, limited: int = 0, waiting: int = 0) -> DoneMessage:
    extra: dict[str, object] = {}
    if v is not None:
        extra[BUDGET_REPORT] = {"v": v, "held": {M: held}, "waiting": {M: waiting}}
    if limited:
        extra[RATE_LIMITED] = limited
    return DoneMessage(
        type="done" if limited else "heartbeat", fleet_id="f", instance_id=instance, worker_id="w", extra=extra
    )


def test_even_split_caps_at_slots_and_spreads_the_remainder():
    assert even_split(10, ["a", "b", "c"], 8) == {"a": 4, "b": 3, "c": 3}
    assert even_split(30, ["a", "b"], 8) == {"a": 8, "b": 8}
    assert even_split(2, ["a", "b", "c"], 8) == {"a": 1, "b": 1, "c": 0}
    assert even_split(5, [], 8) == {}


def test_a_growing_share_waits_for_what_others_still_hold():
    # a and b held 4 each of 8; c joins: a and b are cut to 3 at once, c gets only what is free
    assert divide(8, ["a", "b", "c"], 8, {"a": 4, "b": 4}, {"a": 4, "b": 4}) == {"a": 3, "b": 3, "c": 0}
    # a has given one back: c may take it
    assert divide(8, ["a", "b", "c"], 8, {"a": 3, "b": 3, "c": 0}, {"a": 3, "b": 4}) == {"a": 3, "b": 3, "c": 1}
    assert divide(8, ["a", "b", "c"], 8, {"a": 3, "b": 3, "c": 1}, {"a": 3, "b": 3, "c": 1}) == {
        "a": 3,
        "b": 3,
        "c": 2,
    }


def test_a_dead_workers_share_goes_to_the_others_at_once():
    granted = {"a": 2, "b": 2, "c": 2, "d": 2}
    assert divide(8, ["a", "b", "c"], 8, granted, {"a": 2, "b": 2, "c": 2}) == {"a": 3, "b": 3, "c": 2}


def test_fleet_budget_never_grants_past_the_total_while_workers_join():
    budget = FleetBudget({M: ConnectionBudget(8, 8, 8)}, slots=8)
    first = budget.update(["a"])
    assert first is not None and first.share(M, "a") == 8
    assert budget.update(["a"]) is None  # nothing changed: nothing to write
    doc = budget.update(["a", "b"])
    # a has not said it read its cut: it may still run 8, so b waits
    assert doc is not None and (doc.share(M, "a"), doc.share(M, "b")) == (4, 0)
    budget.on_word(word("a", v=doc.v, held=6))  # read, still finishing 6 of its old jobs
    doc = budget.update(["a", "b"])
    assert doc is not None and (doc.share(M, "a"), doc.share(M, "b")) == (4, 2)
    budget.on_word(word("a", v=doc.v, held=4))
    doc = budget.update(["a", "b"])
    assert doc is not None and (doc.share(M, "a"), doc.share(M, "b")) == (4, 4)
    assert not budget.saturated(["a", "b"])  # all granted, but no request waits for a token
    budget.on_word(word("b", v=doc.v, held=4, waiting=3))
    assert budget.saturated(["a", "b"]) and budget.workers_needed() == 2
    doc = budget.update(["b"])  # a died
    assert doc is not None and doc.share(M, "b") == 8 and doc.share(M, "a") == 0


def test_adaptive_total_cuts_on_rate_limits_and_grows_back():
    now = [0.0]
    budget = FleetBudget({M: ConnectionBudget(2, 10, 12, 0.5, 0.1, 15.0)}, slots=8, clock=lambda: now[0])
    budget.update(["a", "b"])
    assert budget.models[M].total == 10

    def say(worker: str, limited: int, waiting: int = 0) -> None:
        extra = {BUDGET_REPORT: {"v": budget.version, "held": {M: 0}, "waiting": {M: waiting}, "limited": {M: limited}}}
        budget.on_word(DoneMessage(type="heartbeat", fleet_id="f", instance_id=worker, worker_id="w", extra=extra))

    say("a", limited=3)  # a heartbeat says a's jobs met 3 rate limits so far
    now[0] = 1
    budget.update(["a", "b"])
    assert budget.models[M].total == 5 and budget.pressure()
    say("a", limited=3)  # the same count again: nothing new
    budget.on_word(word("b", limited=1))  # a done report's count (a job without the socket)
    now[0] = 2
    budget.update(["a", "b"])
    assert budget.models[M].total == 5  # within the cooldown: one cut
    now[0] = 20
    budget.update(["a", "b"])
    assert budget.models[M].total == 5 and not budget.pressure()  # no request waits: no growth
    for t in range(35, 200, 15):
        say("a", limited=3, waiting=2)
        say("b", limited=0)  # b read the last division (and holds nothing)
        now[0] = t
        budget.update(["a", "b"])
    assert budget.models[M].total == 12  # grown back, once per cooldown, never past the high bound
    say("b", limited=1)  # b's first rate limit by its own count
    now[0] = 300
    budget.update(["a", "b"])
    assert budget.models[M].total == 6 and budget.rate_limited_total == 5


def test_connection_options_mean_a_fleet_budget_and_one_connection_per_job():
    assert connection_budget({"max_connections": 8}) == ConnectionBudget(8, 8, 8)
    assert connection_budget({"adaptive_connections": "4-40"}) == ConnectionBudget(4, 20, 40)
    assert connection_budget({"max_connections": 5, "adaptive_connections": "true"}) == ConnectionBudget(5, 5, 5)
    assert connection_budget({"temperature": 0.2}) is None
    assert one_connection({"max_connections": 8, "adaptive_connections": "true", "seed": 1}) == {
        "max_connections": 1,
        "seed": 1,
    }


def test_budget_document_round_trips_and_refuses_junk():
    doc = Budget(v=3, models={})
    assert Budget.from_json(doc.to_json()) == doc
    for junk in (b"", b"[]", b'{"v": -1}', b'{"v": 1, "models": {"m": {"total": "x"}}}', b"\xff"):
        assert Budget.from_json(junk) is None


def test_a_refused_total_is_tried_again_only_after_a_wait_that_doubles():
    now = [0.0]
    budget = FleetBudget({M: ConnectionBudget(4, 8, 16, 0.8, 0.05, 15.0)}, slots=8, clock=lambda: now[0])
    budget.update(["a"])

    def check(at: float, limited: int) -> int:
        held = {M: budget.models[M].granted["a"]}  # all its share, and more requests wait
        extra = {BUDGET_REPORT: {"v": budget.version, "held": held, "waiting": {M: 3}, "limited": {M: limited}}}
        budget.on_word(DoneMessage(type="heartbeat", fleet_id="f", instance_id="a", worker_id="w", extra=extra))
        now[0] = at
        budget.update(["a"])
        return budget.models[M].total

    assert check(15, 0) == 9  # requests wait for tokens, no refusal: it grows
    assert check(20, 1) == 7  # the provider refused 9: cut at once
    assert [check(t, 1) for t in (35, 50, 65, 79)] == [8, 8, 8, 8]  # back to just under 9, and no further
    assert check(80, 1) == 9  # four cooldowns after the cut, 9 is tried again
    assert check(95, 2) == 7  # refused again: the next try waits twice as long
    assert [check(t, 2) for t in (110, 125, 214)] == [8, 8, 8]
    assert check(215, 2) == 9


def test_a_worker_cuts_its_own_share_at_a_rate_limit_until_the_next_division():
    from ct_fleet.protocol.budget import ModelBudget

    adaptive = Budget(v=1, models={M: ModelBudget(total=9, shares={"a": 5, "b": 4}, adaptive=True)})
    worker = WorkerBudget(adaptive, "a")
    worker.on_limited(M)
    assert worker.allowed(M) == 4 and worker.limited[M] == 1 and worker.news.is_set()
    worker.set(Budget(v=2, models={M: ModelBudget(total=7, shares={"a": 4, "b": 3}, adaptive=True)}))
    assert worker.allowed(M) == 4  # the controller's cut replaces the worker's own
    fixed = WorkerBudget(Budget(v=1, models={M: ModelBudget(total=9, shares={"a": 5})}), "a")
    fixed.on_limited(M)
    assert fixed.allowed(M) == 5  # --max-connections is the user's: no cut


def test_the_models_of_a_shared_provider_count_against_one_budget():
    a, b, other = "openai-api/vllm/a", "openai-api/vllm/b", "openai/gpt-x"
    shared = "openai-api/vllm"
    assert knob_parsing.parse_ec2_args([f"shared_budget={shared},anthropic"]) == {
        "shared_budget": f"{shared},anthropic"
    }
    with pytest.raises(BadInput, match="shared_budget=openai-api//vllm: a provider prefix such as"):
        knob_parsing.parse_ec2_args(["shared_budget=openai-api//vllm"])
    assert budget_keys([a, b, other], shared) == {a: shared, b: shared, other: other}
    assert budget_keys([a, b], None) == {a: a, b: b}
    with pytest.raises(BadInput, match="shared_budget: anthropic is the provider of no --model of the run"):
        budget_keys([a, b], "anthropic")
    with pytest.raises(BadInput, match="give --max-connections"):
        check_shared([a, b], shared, {})
    fleet = FleetBudget.of_options({"max_connections": 2}, [a, b, other], slots=8, shared=shared)
    doc = fleet.update(["w1"])
    assert doc is not None and set(doc.models) == {shared, other}
    assert doc.share(a, "w1") == doc.share(b, "w1") == doc.share(other, "w1") == 2
    # the worker: a request to a and one to b hold the provider's 2; a third waits
    read = Budget.from_json(doc.to_json())
    assert read is not None
    worker, never = WorkerBudget(read, "w1"), threading.Event()
    assert worker.acquire(a, never) and worker.acquire(b, never)
    third = threading.Thread(target=worker.acquire, args=(a, never), daemon=True)
    third.start()
    wait_for(lambda: worker.report()["waiting"] == {shared: 1, other: 0}, timeout=10, every=0.02)
    assert third.is_alive()
    assert worker.acquire(other, never)  # another provider's budget is its own
    worker.release(b)
    third.join(10)
    assert not third.is_alive() and worker.report()["held"] == {shared: 2, other: 1}
    # a rate limit a job of b met counts against the provider's total (a done report's count)
    fleet.on_word(
        DoneMessage(type="done", fleet_id="f", instance_id="w1", worker_id="w", extra={RATE_LIMITED: 2, "model": b})
    )
    assert fleet.models[shared].rate_limited == 2 and fleet.models[other].rate_limited == 0
