"""Values and error messages said in one line: a value as an error may show it (`shown`),
tasks' epochs (`epoch_range`), a message clipped (`clipped`), many similar messages grouped
by kind (`grouped`, `one_line`).

Forty samples failing the same way are one problem, not forty; a reader needs the kinds
and how many of each, the most common first, and not the same repr twenty times over.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

KINDS = 3  # distinct messages named; the rest are counted
WIDTH = 240  # characters of one message


def shown(raw: Any) -> str:
    """A value as a one-line message may show it: control characters escaped, long ones cut."""
    text = str(raw)
    if not text.isprintable():
        text = repr(text)
    return text if len(text) <= 60 else text[:57] + "..."


def epoch_range(each: Iterable[int]) -> str:
    """Tasks' epochs in one word: "3", or "1-3" where tasks run different ones."""
    values = sorted(set(each))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def clipped(message: str, width: int = WIDTH) -> str:
    text = " ".join(message.split()) or "no error reported"
    return text if len(text) <= width else text[: width - 3] + "..."


# What differs between two reports of one problem: an instance, a uuid, a digest, a temp
# directory. Masking these makes "worker i-0a... died" and "worker i-0b... died" one kind.
_IDS = re.compile(
    r"\bi-[0-9a-f]{8,17}\b"  # EC2 instance ids
    r"|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"  # uuids
    r"|\b[0-9a-f]{12,}\b"  # digests, job ids
    r"|(?<=[-_])(?=[a-z_]*[0-9])[a-z0-9_]{8}\b"  # mkdtemp suffixes
    r"|\b(?=[0-9A-Za-z]*[0-9])(?=[0-9A-Za-z]*[A-Z])[0-9A-Za-z]{22}\b"  # Inspect's shortuuids
)


def kind_of(message: str) -> str:
    """The message with its ids masked: two messages of one kind differ only in ids."""
    return _IDS.sub("<id>", message)


def grouped(messages: Iterable[str], *, kinds: int = KINDS, width: int = WIDTH) -> list[str]:
    """`N x message` per kind of message (see `kind_of`), most frequent first (ties: first
    seen), at most `kinds` lines and one more counting the others. Each kind is shown by
    its first message as it was, ids and all, so a reader can look one of them up."""
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for message in messages:
        text = clipped(message, width)
        kind = kind_of(text)
        first.setdefault(kind, text)
        counts[kind] += 1
    ranked = [(first[kind], n) for kind, n in counts.most_common()]
    lines = [f"{n} x {message}" for message, n in ranked[:kinds]]
    rest = ranked[kinds:]
    if rest:
        lines.append(f"and {sum(n for _, n in rest)} more of {len(rest)} other kind(s)")
    return lines


def one_line(messages: Iterable[str], *, kinds: int = KINDS, width: int = WIDTH) -> str:
    return "; ".join(grouped(messages, kinds=kinds, width=width))
