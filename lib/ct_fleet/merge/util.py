"""Small pure helpers of the merge: stable ids, timestamps, canonical JSON, names."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

MERGE_FORMAT_VERSION = 1
"""Bump when the way ids or identities are derived changes (re-merges then get new ids)."""


LISTED = 20  # how many missing/failed samples an error message names


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def json_array(items: Iterable[bytes]) -> Iterator[bytes]:
    yield b"["
    for i, item in enumerate(items):
        yield item if i == 0 else b"," + item
    yield b"]"


def without(d: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    drop = set(keys)
    return {k: v for k, v in d.items() if k not in drop}


ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # shortuuid's


def short_id(*parts: str) -> str:
    """A 22-character shortuuid-style id that is a pure function of `parts`."""
    return short_id_of(*([part.encode()] for part in parts))


def short_id_of(*parts: Iterable[bytes]) -> str:
    """`short_id` of parts given as their UTF-8 bytes, each a stream of chunks (a part too
    long to hold whole)."""
    hasher = hashlib.sha256(f"ct-fleet-merge/{MERGE_FORMAT_VERSION}".encode())
    for part in parts:
        hasher.update(b"\0")
        for chunk in part:
            hasher.update(chunk)
    n = int.from_bytes(hasher.digest()[:16], "big")
    chars = []
    for _ in range(22):
        n, r = divmod(n, len(ALPHABET))
        chars.append(ALPHABET[r])
    return "".join(chars)


def timestamp(value: Any) -> datetime:
    if not value:
        return datetime.min.replace(tzinfo=UTC)
    text = str(value)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def list_keys(keys: list[tuple[str | int, int]]) -> str:
    listed = ", ".join(f"({sid!r}, {ep})" for sid, ep in keys[:LISTED])
    return listed + (f", ... {len(keys) - LISTED} more" if len(keys) > LISTED else "")


def safe_stem(text: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "task"
    return stem[:120]
