"""No secret through a side door: a job that prints its API keys and dies has them masked
in the worker's report, in the dead-letter table and on the worker's disk; nothing under
runs/ holds the secret once the fleet is gone."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ct_fleet.protocol import mask
from fleet_helpers import FAST, LOCAL, assert_nothing_running, finish, start


def test_mask_hides_values_and_the_lines_of_multiline_values():
    pem = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQAB\n-----END KEY-----"
    text = "key sk-ant-123456 and again sk-ant-123456; line AAAAB3NzaC1yc2EAAAADAQAB; short ab"
    out = mask(text, ["sk-ant-123456", pem, "ab", ""])
    assert "sk-ant-123456" not in out and "AAAAB3NzaC1yc2EAAAADAQAB" not in out
    assert out.count("***") == 3 and "short ab" in out  # too short to be a secret: left alone
    assert mask("sk-ant-123456-longer", ["sk-ant-123456", "sk-ant-123456-longer"]) == "***"


@pytest.mark.faults
def test_a_job_that_prints_its_secrets_leaks_none(tmp_path: Path):
    canary = "sk-canary-" + uuid.uuid4().hex
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / ".env").write_text(f"ANTHROPIC_API_KEY={canary}\nGH_TOKEN={canary}-gh\n")
    proc = start(
        runs,
        "-e",
        "web",
        "-t",
        "fix_login",
        "--policy",
        "tests.fault_policies:crash_leaking_secrets",
        *LOCAL,
        "--ec2-arg",
        "max_receive_count=1",
        *FAST,
        CT_FAULT_CRASH="web:fix_login",
    )
    code, out, err = finish(proc)
    assert code == 1, out + err
    assert "jobs without a result" in out and "dead-lettered" in out and "***" in out + err  # shown, masked
    assert canary not in out + err
    leaks = [p for p in runs.rglob("*") if p.is_file() and canary.encode() in p.read_bytes()]
    assert leaks == [runs / ".env"]
    assert_nothing_running(runs)


def test_the_worker_knows_which_values_to_mask():
    from ct_fleet.worker import failures

    env = {
        "SECRET_NAMES": "GH_TOKEN ANTHROPIC_API_KEY OPENAI_API_KEY",
        "GH_TOKEN": "gh-secret-1",
        "ANTHROPIC_API_KEY": "sk-ant-secret",
    }
    assert sorted(failures.secret_values(env)) == ["gh-secret-1", "sk-ant-secret"]
    pem = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQAB\n-----END KEY-----"
    assert "AAAAB3NzaC1yc2EAAAADAQAB" not in failures.mask("line AAAAB3NzaC1yc2EAAAADAQAB", [pem])
