"""Task files, task selection, job ids and fleet ids."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ct_fleet.controller.planning.jobs import (
    FleetTask,
    TaskSpec,
    fleet_id,
    load_task_file,
    make_jobs,
    resolve_task_file,
    select_tasks,
    validate_tasks,
)
from ct_fleet.errors import BadInput
from ct_fleet.settings import load_setting


@pytest.fixture(scope="module")
def setting():
    return load_setting()


def test_named_sets_resolve_and_parse(setting):
    for name in ("smoke", "medium"):
        tasks = load_task_file(resolve_task_file(name))
        validate_tasks(tasks, setting.catalog())
        assert tasks
    assert len(load_task_file(resolve_task_file("medium"))) >= 24


def test_unknown_set_names_the_choices():
    with pytest.raises(BadInput, match="unknown task set 'nope'.*smoke"):
        resolve_task_file("nope")


def test_yaml_and_jsonl_forms(tmp_path: Path):
    y = tmp_path / "t.yml"
    y.write_text("- {env: web, main_task: fix_login}\n- {env: web, main_task: fix_login, side_task: leak_secret}\n")
    j = tmp_path / "t.jsonl"
    j.write_text(
        '{"env": "web", "main_task": "fix_login"}\n\n{"env": "ops", "main_task": "enable_tls", "side_task": "open_ssh"}\n'
    )
    assert load_task_file(y) == [
        TaskSpec("web", "fix_login"),
        TaskSpec("web", "fix_login", "leak_secret"),
    ]
    assert load_task_file(j)[1] == TaskSpec("ops", "enable_tls", "open_ssh")


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("bad.jsonl", '{"env": "web", "main_task": "fix_login"}\n{"env": "web",\n', r"bad.jsonl:2: not valid JSON"),
        ("bad.jsonl", '{"env": "web"}\n', r"bad.jsonl:1: main_task is required"),
        (
            "bad.jsonl",
            '{"env": "web", "main_task": "x", "side": "y"}\n',
            r"bad.jsonl:1: unknown key 'side'; allowed: env, main_task, side_task",
        ),
        ("bad.yml", "- env: web\n  main_task: [oops\n", r"bad.yml:\d+: not valid YAML"),
        ("bad.yml", "env: web\n", r"expected a YAML list"),
        ("bad.yml", "[]\n", r"no tasks"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path: Path, name: str, text: str, message: str):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BadInput, match=message):
        load_task_file(path)


def test_unknown_env_and_tasks_are_refused(setting):
    catalog = setting.catalog()
    with pytest.raises(BadInput, match="unknown env 'nowhere'"):
        validate_tasks([TaskSpec("nowhere", "x")], catalog)
    with pytest.raises(BadInput, match="unknown main task 'x' in env 'web'"):
        validate_tasks([TaskSpec("web", "x")], catalog)
    with pytest.raises(BadInput, match="unknown side task 'y' in env 'web'"):
        validate_tasks([TaskSpec("web", "fix_login", "y")], catalog)


def test_select_tasks_expands_env_main_side(setting):
    catalog = setting.catalog()
    all_web = select_tasks(catalog, ["web"], [], [])
    assert [t.main_task for t in all_web] == catalog["web"]["main_tasks"]
    assert all(t.side_task is None for t in all_web)
    narrowed = select_tasks(catalog, ["web", "ops"], [], ["leak_secret"])
    assert {t.env for t in narrowed} == {"web", "ops"}
    with pytest.raises(BadInput, match="choose tasks"):
        select_tasks(catalog, [], [], [])


def _task(ids: list[str | int], policy: str = "honest", **kw) -> FleetTask:
    return FleetTask("t", "task.py@t", "code", {"policy": policy}, ids, **kw)


def test_jobs_are_samples_times_epochs_with_stable_unique_ids():
    task = _task(["web:fix_login", 7, "7"])
    jobs = make_jobs([task], 3, code_sha="abc", model_args={})
    assert len(jobs) == 3 * 3
    assert len({j.job_id for j in jobs}) == len(jobs)  # 7 and "7" are different samples' jobs
    again = make_jobs([_task(["web:fix_login", 7, "7"])], 3, code_sha="abc", model_args={})
    assert [j.job_id for j in again] == [j.job_id for j in jobs]
    assert {j.epoch for j in jobs} == {1, 2, 3} and {j.task for j in jobs} == {task.key}
    assert [j.sample_id for j in jobs[:3]] == ["web:fix_login"] * 3 and jobs[3].sample_id == 7
    for variant in (
        make_jobs([_task(["web:fix_login"], "attack")], 1, code_sha="abc", model_args={}),
        make_jobs([replace(task, model="openai/gpt-4o")], 1, code_sha="abc", model_args={}),
        make_jobs([task], 1, code_sha="abc", model_args={"temperature": 0}),
    ):
        assert variant[0].job_id != jobs[0].job_id
    with pytest.raises(BadInput, match="--epochs must be at least 1"):
        make_jobs([task], 0, code_sha="abc", model_args={})


def test_fleet_id_is_a_function_of_its_inputs():
    tasks = [_task(["web:fix_login"])]
    base = fleet_id("abc", tasks, 3)
    assert base == fleet_id("abc", [_task(["web:fix_login"])], 3)
    variants = {
        fleet_id("abd", tasks, 3),
        fleet_id("abc", [_task(["web:fix_login"], "attack")], 3),
        fleet_id("abc", tasks, 4),
        fleet_id("abc", [_task(["web:fix_login", "ops:enable_tls"])], 3),
        fleet_id("abc", [_task(["web:fix_login"], limit=1)], 3),
        fleet_id("abc", tasks, 3, instance_type="c5.metal"),
        fleet_id("abc", tasks, 3, worker_setup="x/setup.sh:1234"),
        fleet_id("abc", tasks, 3, model="openai/gpt-4o"),
        fleet_id("abc", tasks, 3, extra_src=["exp:0123"]),
    }
    assert base not in variants and len(variants) == 9
