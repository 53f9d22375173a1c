"""What a worker's bootstrap log says went wrong: the step that failed and the line why.

Each step logs `step NAME: start` and `step NAME: ok in Ns` or `FAILED (exit N) after Ns`
(worker/lib.sh); the wrapper step `bootstrap` fails with any of them, so the failed step
is the first FAILED one. Its reason is the step's last line before the failure: for
settings-pull, "setting NAME: FAILED: ..." (ct_fleet.settings pull).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STEP_LINE = re.compile(r"\[(?P<tag>[^\]]*)\] step (?P<step>[\w-]+): (?P<what>start|ok|FAILED.*)")
# Steps whose failure repeats on every worker: replacing workers cannot help.
DETERMINISTIC = frozenset({"settings-pull", "worker-setup"})


@dataclass(frozen=True)
class BootFailure:
    step: str
    line: str  # the step's FAILED line
    reason: str  # the last line the step printed before failing

    @property
    def deterministic(self) -> bool:
        return self.step in DETERMINISTIC

    def describe(self) -> str:
        return f"step {self.step} failed: {self.reason}" if self.reason else f"step {self.step} failed"


def failed_step(text: str) -> BootFailure | None:
    lines = text.splitlines()
    started: dict[str, int] = {}
    for number, line in enumerate(lines):
        match = STEP_LINE.search(line)
        if not match:
            continue
        step, what = match.group("step"), match.group("what")
        if what == "start":
            started[step] = number
        elif what.startswith("FAILED") and step != "bootstrap":
            body = [
                raw.strip()
                for raw in lines[started.get(step, 0) + 1 : number]
                if raw.strip() and not STEP_LINE.search(raw)
            ]
            reason = next((b for b in reversed(body) if "FAILED" in b or "ERROR" in b), body[-1] if body else "")
            return BootFailure(step, line.strip(), _untagged(reason))
    return None


def _untagged(line: str) -> str:
    """The text of a log line without its timestamp and step tag."""
    return re.sub(r"^\S+ \[[^\]]*\] ", "", line)
