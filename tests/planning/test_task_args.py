"""-T/--task-arg: parsed like `inspect eval -T`, checked by the setting, part of the fleet id,
and handed to every job next to the policy; the setting's compose files decide Docker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ct_fleet.controller.planning import FleetRequest, plan_fleet
from ct_fleet.controller.planning.task_args import merge_policy, parse_kv
from ct_fleet.errors import BadInput


def test_values_parse_like_inspects_task_args():
    assert parse_kv(["sandbox=local", "n=3", "flag=true", "envs=web,ops", "q='a,b'", "max-n=1"], "-T") == {
        "sandbox": "local",
        "n": 3,
        "flag": True,
        "envs": ["web", "ops"],
        "q": "a,b",
        "max_n": 1,
    }
    assert parse_kv(["url=http://x/?a=b"], "-T") == {"url": "http://x/?a=b"}
    assert parse_kv([], "-T") == {}


@pytest.mark.parametrize("pair", ["sandbox", "=local", "two words=1", "1x=2"])
def test_a_malformed_pair_is_bad_input(pair: str):
    with pytest.raises(BadInput, match="write -T key=value"):
        parse_kv([pair], "-T")


def test_the_policy_comes_first_and_only_from_policy():
    assert merge_policy("attack", {"sandbox": "local"}) == {"policy": "attack", "sandbox": "local"}
    with pytest.raises(BadInput, match="--policy"):
        merge_policy("honest", {"policy": "attack"})


def plan(tmp_path: Path, *pairs: str):
    return plan_fleet(FleetRequest(task_file="smoke", task_args=pairs, runs_dir=tmp_path, dotenv=tmp_path / ".env"))


def test_task_args_reach_the_manifest_and_the_fleet_id(tmp_path: Path):
    docker, local, default = plan(tmp_path, "sandbox=docker"), plan(tmp_path, "sandbox=local"), plan(tmp_path)
    (local_task,) = local.spec.manifest().tasks
    assert local_task.task_args == {"policy": "honest", "sandbox": "local"}
    assert [t.task_args for t in default.spec.manifest().tasks] == [{"policy": "honest"}]
    assert len({docker.spec.fleet_id, local.spec.fleet_id, default.spec.fleet_id}) == 3
    assert plan(tmp_path, "sandbox=local").spec.fleet_id == local.spec.fleet_id  # a rerun resumes
    work = local.spec.manifest().work_message(local.spec.manifest().jobs[0])
    assert work.task_args == {"policy": "honest", "sandbox": "local"}
    # A job is one sample of one task as built with its arguments: other args, other jobs.
    assert not {j.job_id for j in local.spec.jobs} & {j.job_id for j in docker.spec.jobs}
    assert list(tmp_path.iterdir()) == []  # planning creates no run


def test_the_setting_decides_whether_docker_is_needed(tmp_path: Path):
    needs = plan(tmp_path).docker
    assert sorted(needs.images) == sorted(plan(tmp_path, "sandbox=docker").docker.images)
    assert len(needs.images) == 3 and all(ref.startswith("ct-fleet/toyarena-") for ref in needs.images)
    assert needs.required and needs.builders == ["toyarena"]
    local = plan(tmp_path, "sandbox=local").docker
    assert local.images == [] and not local.required


@pytest.mark.parametrize(
    "pair,message",
    [
        ("sandbox=vm", "use -T sandbox=docker or -T sandbox=local"),
        ("seed=3", "toyarena has no task argument seed"),
        ("policy=attack", "choose the policy with --policy"),
    ],
)
def test_the_setting_refuses_what_its_task_does_not_take(tmp_path: Path, pair: str, message: str):
    with pytest.raises(BadInput, match=message):
        plan(tmp_path, pair)


@pytest.mark.parametrize(
    "pair,message",
    [
        ("xs=[&a [1,2], *a, *a]", "-T xs: YAML anchors"),
        ("x=*a", "-T x: YAML aliases"),
        ("n=" + "1" * 120_000, "over the 32,768-byte limit of one value"),
        ("n=" + "9" * 24, "-T n: the number " + "9" * 24 + " is beyond 64 bits"),
    ],
)
def test_values_that_amplify_or_overflow_are_refused(pair: str, message: str):
    with pytest.raises(BadInput, match=re.escape(message)):
        parse_kv([pair], "-T")


def test_text_that_is_not_yaml_stays_the_text_typed():
    assert parse_kv(["x=a: [1", "d=2024-13-01", "q='9999999999999999999999999'"], "-T") == {
        "x": "a: [1",
        "d": "2024-13-01",
        "q": "9999999999999999999999999",
    }


def test_arguments_too_large_for_a_work_message_are_refused_before_launch(tmp_path: Path):
    """Each value is under its own limit; together they make a message SQS would refuse."""
    big = [f"a{i}=" + "x" * (30 << 10) for i in range(9)]
    request = FleetRequest(task_file="smoke", model_args=big, runs_dir=tmp_path, dotenv=tmp_path / ".env")
    with pytest.raises(BadInput, match=r"one job's work message would be [\d,]+ bytes, over SQS's 262,144-byte limit"):
        plan_fleet(request)
