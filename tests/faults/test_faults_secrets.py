"""No secret through a side door: the masking a job's words go through. The drill of a job
that prints its API keys and dies (masked in the worker's report, in the dead-letter table
and on the worker's disk; nothing under runs/ holds the secret once the fleet is gone)
runs on the shared fleet of test_faults_drill.py."""

from __future__ import annotations

from ct_fleet.protocol import mask


def test_mask_hides_values_and_the_lines_of_multiline_values():
    pem = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQAB\n-----END KEY-----"
    text = "key sk-ant-123456 and again sk-ant-123456; line AAAAB3NzaC1yc2EAAAADAQAB; short ab"
    out = mask(text, ["sk-ant-123456", pem, "ab", ""])
    assert "sk-ant-123456" not in out and "AAAAB3NzaC1yc2EAAAADAQAB" not in out
    assert out.count("***") == 3 and "short ab" in out  # too short to be a secret: left alone
    assert mask("sk-ant-123456-longer", ["sk-ant-123456", "sk-ant-123456-longer"]) == "***"


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
