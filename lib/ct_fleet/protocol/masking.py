"""Secret values out of text that leaves a worker or reaches a table: job errors, log lines.

Both sides mask: the worker before a done report leaves it (it knows its secrets from
secrets.env), and the controller again before a report reaches a table or a warning (it
knows what it handed out). A value is replaced wherever it appears, and so is each line
of a multi-line value (a PEM key's lines appear on their own in tracebacks).
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"
# Shorter values would mask ordinary words; no real API key or token is this short.
MIN_LENGTH = 6


def _needles(secrets: Iterable[str]) -> list[str]:
    found: set[str] = set()
    for value in secrets:
        if not value:
            continue
        for piece in (value, *value.splitlines()):
            piece = piece.strip()
            if len(piece) >= MIN_LENGTH:
                found.add(piece)
    return sorted(found, key=len, reverse=True)  # longest first: a value may contain another


def mask(text: str, secrets: Iterable[str]) -> str:
    for needle in _needles(secrets):
        text = text.replace(needle, MASK)
    return text
