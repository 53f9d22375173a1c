"""The bash step lines (lib/bash/ct.sh, ct_log / ct_step / ct_die) and their one parser.

    <UTC time> [<tag>] step <name>: start
    <UTC time> [<tag>] step <name>: ok in <seconds>s
    <UTC time> [<tag>] step <name>: FAILED (exit <status>) after <seconds>s
    <UTC time> [<tag>] ERROR: <message>

A line may carry a prefix (Packer puts "    amazon-ebs.worker: " before each line of a
provisioning script), so the parser searches each line rather than matching it whole.
Read by the AMI build (step timings from Packer's output) and by the controller (the step
that failed in a worker's uploaded bootstrap log).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

LINE_RE = re.compile(r"(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) \[(?P<tag>[^\]]+)\] (?P<message>.*)$")
STEP_RE = re.compile(
    r"step (?P<name>[^\s:]+): "
    r"(?:(?P<start>start)|ok in (?P<ok>\d+)s|FAILED \(exit (?P<status>\d+)\) after (?P<failed>\d+)s)$"
)
ERROR_PREFIX = "ERROR: "

Event = Literal["start", "ok", "failed"]


@dataclass(frozen=True)
class LogLine:
    time: str
    tag: str
    message: str


@dataclass(frozen=True)
class StepLine:
    time: str
    tag: str
    name: str
    event: Event
    seconds: int | None = None  # ok and failed
    status: int | None = None  # failed


@dataclass(frozen=True)
class Failure:
    """The innermost step that failed (its FAILED line comes first) and what was said before it."""

    step: StepLine
    error: str | None

    def describe(self) -> str:
        text = f"step {self.step.name} FAILED (exit {self.step.status}) after {self.step.seconds}s"
        return f"{text}: {self.error}" if self.error else text


def parse_line(line: str) -> LogLine | None:
    match = LINE_RE.search(line.rstrip("\r\n"))
    return LogLine(match["time"], match["tag"], match["message"]) if match else None


def parse_step(line: str) -> StepLine | None:
    log = parse_line(line)
    match = STEP_RE.fullmatch(log.message) if log else None
    if log is None or match is None:
        return None
    if match["start"]:
        return StepLine(log.time, log.tag, match["name"], "start")
    if match["ok"] is not None:
        return StepLine(log.time, log.tag, match["name"], "ok", seconds=int(match["ok"]))
    return StepLine(
        log.time, log.tag, match["name"], "failed", seconds=int(match["failed"]), status=int(match["status"])
    )


def steps(lines: Iterable[str]) -> list[StepLine]:
    return [step for step in map(parse_step, lines) if step is not None]


def first_failure(text: str) -> Failure | None:
    """Why a log's run failed: the first FAILED step line (the innermost step), with the
    step's last ERROR line, else the last line a command printed in that step."""
    error = output = None
    for line in text.splitlines():
        log = parse_line(line)
        if log is None:
            output = line.strip() or output
        elif log.message.startswith(ERROR_PREFIX):
            error = log.message[len(ERROR_PREFIX) :]
        else:
            step = parse_step(line)
            if step and step.event == "start":
                error = output = None  # what an earlier step said is not why this one failed
            elif step and step.event == "failed":
                return Failure(step, error or output)
    return None
