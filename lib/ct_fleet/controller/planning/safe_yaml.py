"""Reading the user's text files (run configs, task files, .env): bounded, UTF-8, plain YAML.

A YAML alias can make a few hundred bytes expand into gigabytes (the "billion laughs"),
so aliases, anchors and merge keys (`<<`) are refused outright: a run config or a task
file never needs them. Duplicate keys are refused too, since YAML would silently keep
the last one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ...errors import BadInput

MERGE_TAG = "tag:yaml.org,2002:merge"


def read_text(path: Path, *, max_bytes: int, what: str) -> str:
    """The file's text: at most max_bytes, UTF-8 (a leading BOM is dropped)."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BadInput(f"{path}: {what} of {size:,} bytes is over the {max_bytes:,}-byte limit")
        data = path.read_bytes()
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:  # grew while we looked (or a special file)
        raise BadInput(f"{path}: {what} is over the {max_bytes:,}-byte limit")
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

    def _refuse(self, node_or_event: Any, what: str) -> None:
        mark = getattr(node_or_event, "start_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise BadInput(f"{self.source}{line}: {what} are not allowed here; write the values out")

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
    except RecursionError:
        raise BadInput(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()
