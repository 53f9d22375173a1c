"""Why a job failed, in the job's own words, and whether another attempt could help.

A failed attempt is reported with the last lines of the job's stderr (secret values
masked). Its class decides what happens next:
- model_api: rate limits and overloaded providers; retried with backoff, and the worker
  lowers its concurrency;
- fatal: what no retry can fix (authentication, an unknown model, a bad request, code
  that does not import); final at once, never retried into the dead-letter queue;
- infra: anything else; retried.

The class is decided at the root, by the runner that saw the failure, not guessed from
text: a runner whose task raised (it does not load, names no task or several, does not
import, Inspect refuses it: a sandbox that cannot build or pull, a model it cannot start)
exits TASK_FAILED after printing one summary line (SUMMARY, the exception and its causes).
Another attempt runs the same code on the same kind of machine, so that is fatal, unless
the machine itself gave out (MACHINE: a full disk, no memory, no Docker daemon) or the
model API pushed back. Any other ending (a signal, a dead warm server, an interpreter
crash) did not come from the task: it is classed by its text as before, and retried.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable, Mapping

from ..protocol import masking

RATE_LIMIT = re.compile(r"rate.?limit|\b429\b|overloaded|too many requests|RateLimitError", re.I)

FATAL = re.compile(
    r"AuthenticationError|PermissionDeniedError|invalid.?api.?key|incorrect api key"
    r"|NotFoundError|model_not_found|model .{0,80}(does not exist|not found)"
    r"|BadRequestError|invalid_request_error|UnprocessableEntityError"
    r"|error code: 40[0134]\b|status(_| )?code\W{0,3}40[0134]\b"
    r"|ModuleNotFoundError|ImportError|SyntaxError|PrerequisiteError|requires optional dependenc"
    r"|No matches in dataset|not recognized|environment variable",
    re.I,
)

# The per-job runner's exit status when the job's task raised (module doc).
TASK_FAILED = 3
SUMMARY = "ct-fleet job failed: "

# Machine faults that surface as an exception of the task's run: another machine may do.
MACHINE = re.compile(
    r"No space left on device|Disk quota exceeded|Cannot allocate memory|MemoryError"
    r"|Cannot connect to the Docker daemon|Is the docker daemon running",
    re.I,
)
MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.ENOMEM, errno.EIO})

# What a tool the task's sandbox runs says when it fails (docker compose build or pull):
# Inspect's exception names only the step, the cause is in the job's own output.
TOOL_ERROR = re.compile(
    r"^\s*(failed to solve:|error response from daemon:|error:|#\d+ ERROR:|pull access denied)", re.I
)

TAIL_LINES = 12
MASK = masking.MASK


def classify(text: str) -> str:
    """model_api, fatal or infra (module doc)."""
    if RATE_LIMIT.search(text):
        return "model_api"
    if FATAL.search(text):
        return "fatal"
    return "infra"


def describe(exc: BaseException) -> str:
    """The exception and what it was raised from, on one line: `Type: message <- Type: message`.

    Only explicit causes (`raise ... from`): an exception met while handling another is
    often cleanup noise. A group (anyio's task groups) stands for its first member."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) < 4:
        seen.add(id(current))
        while isinstance(current, BaseExceptionGroup) and current.exceptions:
            current = current.exceptions[0]
        text = " ".join(str(current).split())
        parts.append(f"{type(current).__name__}: {text}" if text else type(current).__name__)
        current = current.__cause__
    return " <- ".join(parts)


def exit_status(exc: BaseException) -> int:
    """TASK_FAILED for an exception of the task's run, 1 for a fault of the machine."""
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS):
        return 1
    return 1 if MACHINE.search(describe(exc)) else TASK_FAILED


def summary_line(exc: BaseException) -> str:
    return SUMMARY + describe(exc)


def task_failure(output: str) -> str | None:
    """What a runner that exited TASK_FAILED said went wrong: its summary line, with the
    last error line of a tool before the traceback when the summary names only a step.
    None without a summary line: then the exit status is not the runner's own."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    summary = next((line[len(SUMMARY) :] for line in reversed(lines) if line.startswith(SUMMARY)), "")
    if not summary:
        return None
    before = lines[: next((i for i, line in enumerate(lines) if line.startswith("Traceback")), len(lines))]
    cause = next((line for line in reversed(before) if TOOL_ERROR.match(line)), "")
    cause = re.sub(r"^#\d+ ", "", cause)
    return f"{summary}: {cause}" if cause and cause not in summary else summary


def classify_exit(code: int, output: str) -> tuple[str, str]:
    """(class, the line that says why) of a runner that exited non-zero (module doc)."""
    # Both the status and the summary line: a task's own code may exit 3 too (os._exit).
    why = task_failure(output) if code == TASK_FAILED else None
    if why is not None:
        if RATE_LIMIT.search(why):
            return "model_api", why
        return ("infra" if MACHINE.search(why) else "fatal"), why
    return classify(output), last_line(output)


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """The values of the fleet's secrets in a worker's environment (SECRET_NAMES)."""
    names = environ.get("SECRET_NAMES", "").split()
    # Short values would mask ordinary words; no real key is this short.
    return sorted({environ[n] for n in names if len(environ.get(n, "")) >= 6}, key=len, reverse=True)


def mask(text: str, secrets: Iterable[str]) -> str:
    """Every secret value (and each line of a multi-line one) replaced (protocol.masking)."""
    return masking.mask(text, secrets)


def tail(text: str, secrets: Iterable[str], lines: int = TAIL_LINES) -> str:
    """The last non-empty lines of a job's output, secrets masked."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return mask("\n".join(kept), secrets)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
