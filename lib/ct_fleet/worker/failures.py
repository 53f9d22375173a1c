"""Why a job failed, in the job's own words, and whether another attempt could help.

A failed attempt is reported with the last lines of the job's stderr (secret values
masked). Its class decides what happens next:
- model_api: rate limits and overloaded providers; retried with backoff, and the worker
  lowers its concurrency;
- fatal: what no retry can fix (authentication, an unknown model, a bad request, code
  that does not import); final at once, never retried into the dead-letter queue;
- infra: anything else; retried.
"""

from __future__ import annotations

import os
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

TAIL_LINES = 12
MASK = masking.MASK


def classify(text: str) -> str:
    """model_api, fatal or infra (module doc)."""
    if RATE_LIMIT.search(text):
        return "model_api"
    if FATAL.search(text):
        return "fatal"
    return "infra"


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the fleet's secrets in this process's environment (SECRET_NAMES)."""
    env = os.environ if environ is None else environ
    names = env.get("SECRET_NAMES", "").split()
    # Short values would mask ordinary words; no real key is this short.
    return sorted({env[n] for n in names if len(env.get(n, "")) >= 6}, key=len, reverse=True)


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
