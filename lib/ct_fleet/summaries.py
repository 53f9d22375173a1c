"""Many similar errors said in a few lines: one line per distinct message, with its count.

Forty samples failing the same way are one problem, not forty; a reader needs the kinds
and how many of each, the most common first, and not the same repr twenty times over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

KINDS = 3  # distinct messages named; the rest are counted
WIDTH = 240  # characters of one message


def clipped(message: str, width: int = WIDTH) -> str:
    text = " ".join(message.split()) or "no error reported"
    return text if len(text) <= width else text[: width - 3] + "..."


def grouped(messages: Iterable[str], *, kinds: int = KINDS, width: int = WIDTH) -> list[str]:
    """`N x message` per distinct message, most frequent first (ties: first seen), at most
    `kinds` lines and one more counting the others."""
    counts = Counter(clipped(m, width) for m in messages)
    ranked = counts.most_common()
    lines = [f"{n} x {message}" for message, n in ranked[:kinds]]
    rest = ranked[kinds:]
    if rest:
        lines.append(f"and {sum(n for _, n in rest)} more of {len(rest)} other kind(s)")
    return lines


def one_line(messages: Iterable[str], *, kinds: int = KINDS, width: int = WIDTH) -> str:
    return "; ".join(grouped(messages, kinds=kinds, width=width))
