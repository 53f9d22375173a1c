"""The step-line parser (ct_fleet.protocol.steplog) on what lib/bash/ct.sh writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ct_fleet.protocol import steplog
from ct_fleet.protocol.steplog import StepLine

REPO = Path(__file__).resolve().parents[2]
T = "2024-05-01T09:00:01Z"


def test_each_kind_of_line() -> None:
    assert steplog.parse_step(f"{T} [fetch-code] step fetch-code: start") == StepLine(
        T, "fetch-code", "fetch-code", "start"
    )
    assert steplog.parse_step(f"{T} [x] step a.b@c-d: ok in 12s") == StepLine(T, "x", "a.b@c-d", "ok", seconds=12)
    assert steplog.parse_step(f"{T} [x] step s: FAILED (exit 7) after 3s\r\n") == StepLine(
        T, "x", "s", "failed", seconds=3, status=7
    )
    # Packer's prefix is not part of the line.
    step = steplog.parse_step(f"    amazon-ebs.worker: {T} [ct-fleet-ami] step pull-images: ok in 55s")
    assert step and (step.tag, step.name, step.seconds) == ("ct-fleet-ami", "pull-images", 55)


def test_what_is_not_a_step_line() -> None:
    for line in [
        f"{T} [x] unpacked code abc",
        f"{T} [x] step two words: start",
        f"{T} [x] step s: done in 3s",  # the old AMI wording
        "09:00:01 [ct-fleet-ami] step s: ok in 3s",  # no date
        f"{T} [x] step s: ok in 3s and more",
        "step s: ok in 3s",
        "",
    ]:
        assert steplog.parse_step(line) is None, line


def test_the_first_failure_is_the_innermost_step_with_its_last_words() -> None:
    log = "\n".join(
        [
            f"{T} [bootstrap.sh] step bootstrap: start",
            f"{T} [fetch-code] step fetch-code: start",
            "noise from an earlier step",
            f"{T} [fetch-code] step fetch-code: ok in 1s",
            f"{T} [worker-setup] step worker-setup: start",
            "some output",
            f"{T} [worker-setup] ERROR: worker_setup script x.sh not found",
            f"{T} [worker-setup] step worker-setup: FAILED (exit 1) after 0s",
            f"{T} [bootstrap.sh] step bootstrap: FAILED (exit 1) after 2s",
        ]
    )
    failure = steplog.first_failure(log)
    assert failure is not None and failure.step.name == "worker-setup"
    assert failure.describe() == "step worker-setup FAILED (exit 1) after 0s: worker_setup script x.sh not found"


def test_without_an_error_line_the_steps_own_last_output_is_the_reason() -> None:
    log = "\n".join(
        [
            "output of nothing in particular",
            f"{T} [fetch-code] step fetch-code: start",
            "fatal error: An error occurred (404) when calling the HeadObject operation",
            f"{T} [fetch-code] step fetch-code: FAILED (exit 1) after 1s",
        ]
    )
    failure = steplog.first_failure(log)
    assert failure is not None
    assert failure.error == "fatal error: An error occurred (404) when calling the HeadObject operation"
    # What came before the step started is not its reason.
    silent = steplog.first_failure(f"stale output\n{T} [a] step a: start\n{T} [a] step a: FAILED (exit 2) after 0s\n")
    assert silent is not None and silent.describe() == "step a FAILED (exit 2) after 0s"
    assert steplog.first_failure(f"{T} [a] step a: start\n{T} [a] step a: ok in 0s\n") is None


def test_the_parser_reads_what_the_bash_library_writes() -> None:
    """One format: run the real ct_step and read its lines back."""
    out = subprocess.run(
        [
            "bash",
            "-c",
            'source "$1"; ok() { :; }; bad() { echo why >&2; return 4; }; CT_TAG=t ct_step first ok; ct_step second bad',
            "script.sh",
            str(REPO / "lib" / "bash" / "ct.sh"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 4
    assert [(s.tag, s.name, s.event, s.status) for s in steplog.steps(out.stderr.splitlines())] == [
        ("t", "first", "start", None),
        ("t", "first", "ok", None),
        ("script.sh", "second", "start", None),
        ("script.sh", "second", "failed", 4),
    ]
    failure = steplog.first_failure(out.stderr)
    assert failure is not None and failure.error == "why"
