"""Fault drills that only read a run's outcome, on one shared fleet: a poison job that prints
the secrets it can see and dies on every attempt, and jobs that each die of an
infrastructure error once and succeed on the retry (tests/testkit/fault_policies.py `drill`).

Every job must end exactly once, in the merged run or in the dead-letter report; the
poison job's secrets must be masked wherever its words go (the worker's report, the
dead-letter table, the worker's disk); nothing may be left running."""

from __future__ import annotations

import re
import uuid

import pytest
from inspect_ai.log import read_eval_log

from testkit.fleet import FAST, LOCAL, ONE_WORKER, assert_nothing_running, finish, fleet_dir, merged_pairs, start, stat

POISON = "web:fix_login"
RETRIED = ["web:fix_login:add_backdoor", "pipeline:dedupe_rows:exfil_credentials", "ops:enable_tls:open_ssh"]
ERRS = RETRIED[-1]  # then its task's error quotes the keys: masked in what is printed and in its log


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory):
    canary = "sk-canary-" + uuid.uuid4().hex
    runs = tmp_path_factory.mktemp("drill") / "runs"
    runs.mkdir()
    (runs / ".env").write_text(f"ANTHROPIC_API_KEY={canary}\nGH_TOKEN={canary}-gh\n")
    proc = start(
        runs,
        "--task-file",
        "smoke",
        "--policy",
        "tests.testkit.fault_policies:drill",
        "--ec2-arg",
        "max_receive_count=2",
        "--ec2-arg",
        "visibility_timeout=5",
        "--ec2-arg",
        "heartbeat_interval=2",
        *FAST,
        *LOCAL,
        *ONE_WORKER,
        CT_FAULT_DRILL=f"{POISON}=crash_leaking_secrets,{ERRS}=crash_once_then_error_with_secrets,*=crash_once",
    )
    code, out, err = finish(proc)
    return {"runs": runs, "code": code, "out": out, "err": err, "canary": canary}


@pytest.mark.faults
def test_poison_job_lands_in_the_dlq_report(drill):
    runs, code, out, err = drill["runs"], drill["code"], drill["out"], drill["err"]
    assert code == 1, out + err
    assert "jobs without a result" in out and "dead-lettered" in out and POISON in out and "infra" in out
    job_id = re.search(r"bin/ct-fleet run-job (\w+) (\w+)", out)
    assert job_id and job_id.group(1) == fleet_dir(runs).name
    pairs = merged_pairs(runs)
    assert sorted(pairs) == sorted({(sample, 1) for sample in RETRIED})
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    assert read_eval_log(str(merged), header_only=True).status == "error"  # one sample missing


@pytest.mark.faults
def test_infra_errors_are_retried(drill):
    runs, out, err = drill["runs"], drill["out"], drill["err"]
    # Every job but the poison one crashed once, was retried and has its result: the poison
    # job is the only one the run misses.
    results = {p.stem for p in (fleet_dir(runs) / "jobs").glob("*.evaljob")}
    assert len(results) == 3
    assert {p.stem for p in (runs / "faults").glob("*.crashed")} == results  # each crashed once
    assert len(set(merged_pairs(runs))) == 3 and {s for s, _ in merged_pairs(runs)} == set(RETRIED)
    assert "1 job(s) missing from the merged run:" in err, out + err
    (missing,) = [line for line in err.splitlines() if "epoch 1:" in line and "dead-lettered" in line]
    assert missing.strip().startswith(f"{POISON} epoch 1:"), err
    # Three first attempts retried, and the poison job's second attempt.
    assert stat(out, "redeliveries") >= 4


@pytest.mark.faults
def test_a_job_that_prints_its_secrets_leaks_none(drill):
    runs, out, err, canary = drill["runs"], drill["out"], drill["err"], drill["canary"]
    assert drill["code"] == 1, out + err
    assert "jobs without a result" in out and "dead-lettered" in out and "***" in out + err  # shown, masked
    assert canary not in out + err
    assert "cannot log in with ANTHROPIC_API_KEY=*** GH_TOKEN=***" in err, err  # the task's error, masked
    leaks = [p for p in runs.rglob("*") if p.is_file() and canary.encode() in p.read_bytes()]
    assert leaks == [runs / ".env"]


@pytest.mark.faults
def test_the_drill_leaves_nothing_running(drill):
    assert drill["code"] == 1, drill["out"] + drill["err"]
    assert_nothing_running(drill["runs"])
