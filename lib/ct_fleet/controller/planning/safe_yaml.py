"""Reading the user's text files (run configs, task files, .env): bounded, UTF-8, plain YAML.

A YAML alias can make a few hundred bytes expand into gigabytes (the "billion laughs"),
so aliases, anchors and merge keys (`<<`) are refused outright: a run config or a task
file never needs them. Duplicate keys are refused too, since YAML would silently keep
the last one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from ...errors import BadInput

MERGE_TAG = "tag:yaml.org,2002:merge"
INT_TAG = "tag:yaml.org,2002:int"
# Whole numbers are kept to 64 bits: Python would take any size (slowly: 120,000 digits
# take seconds, and past 4,300 digits int() refuses), but JSON readers elsewhere would not.
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1
INT_MAX_CHARS = 80


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_bytes(path: Path, *, max_bytes: int, what: str) -> bytes:
    """At most max_bytes of a regular file; anything else (a device, a FIFO) is refused unread."""
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        # The opened file, not the path: a path can be swapped between a check and the open.
        mode, size = (st := os.fstat(fd)).st_mode, st.st_size
        if stat.S_ISDIR(mode):
            raise BadInput(f"{path}: is a directory, not a {what}")
        if not stat.S_ISREG(mode):
            raise BadInput(f"{path}: is {_kind(mode)}, not a {what}; give a regular file")
        if size > max_bytes:
            raise BadInput(f"{path}: {what} of {size:,} bytes is over the {max_bytes:,}-byte limit")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew while we read it
        raise BadInput(f"{path}: {what} is over the {max_bytes:,}-byte limit")
    return data


def read_text(path: Path, *, max_bytes: int, what: str) -> str:
    """The file's text: at most max_bytes of a regular file, UTF-8 (a leading BOM is dropped)."""
    data = read_bytes(path, max_bytes=max_bytes, what=what)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInput(f"{path}:{line}: the {what} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise BadInput(f"{path}: the {what} contains NUL bytes; is it a binary file?")
    return text


class _PlainLoader(yaml.SafeLoader):
    """SafeLoader without aliases, anchors, merge keys or duplicate keys."""

    source = "<yaml>"
    lines = True  # a file's line numbers; not for a one-line value from the command line

    def where(self, mark: Any) -> str:
        return f"{self.source}:{mark.line + 1}" if mark and self.lines else self.source

    def _refuse(self, node_or_event: Any, what: str) -> None:
        raise BadInput(
            f"{self.where(getattr(node_or_event, 'start_mark', None))}: {what} are not allowed here; write the values out"
        )

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._refuse(self.peek_event(), "YAML aliases (*name)")  # type: ignore[no-untyped-call]
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if getattr(event, "anchor", None):
            self._refuse(event, "YAML anchors (&name)")
        return super().compose_node(parent, index)

    def flatten_mapping(self, node: Any) -> None:
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                self._refuse(key_node, "YAML merge keys (<<)")
        super().flatten_mapping(node)

    def construct_int(self, node: Any) -> Any:
        text = str(node.value)
        if len(text) <= INT_MAX_CHARS:
            value = self.construct_yaml_int(node)
            if INT_MIN <= value <= INT_MAX:
                return value
        shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text):,} characters)"
        raise BadInput(
            f"{self.where(node.start_mark)}: the number {shown} is beyond 64 bits; quote it to pass it as text"
        )

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                self._refuse(key_node, "YAML merge keys (<<)")
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise BadInput(f"{self.source}:{key_node.start_mark.line + 1}: a mapping key must be text") from None
            if duplicate:
                raise BadInput(f"{self.source}:{key_node.start_mark.line + 1}: duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_PlainLoader.add_constructor(INT_TAG, _PlainLoader.construct_int)


def load_value(text: str, source: str) -> tuple[Any, bool]:
    """A command-line value read as YAML, and whether it was a plain (unquoted) scalar.

    Text that is not valid YAML is the string typed; anchors, aliases and numbers beyond
    64 bits are refused as in a file.
    """
    loader = _PlainLoader(text)
    loader.source, loader.lines = source, False
    try:
        node = loader.get_single_node()
        value = None if node is None else loader.construct_document(node)
    except (yaml.YAMLError, ValueError):  # ValueError: a date like 2024-13-01
        return text, False
    except RecursionError:
        raise BadInput(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    return value, isinstance(node, yaml.ScalarNode) and node.style is None


def load(text: str, source: str) -> Any:
    """Parse plain YAML; any problem is one line naming the file and line."""
    loader = _PlainLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"{source}{line}: not valid YAML ({problem})") from None
    except ValueError as exc:  # a date like 2024-13-01
        raise BadInput(f"{source}: not valid YAML ({exc})") from None
    except RecursionError:
        raise BadInput(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()
