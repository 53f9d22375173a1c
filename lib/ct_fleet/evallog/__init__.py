"""Reading and editing Inspect `.eval` logs at the byte level, shared by both sides.

- header: cheap checks without importing inspect_ai (is a log finished, did its sample fail)
- zipio: zip entries copied raw (compressed bytes) or written zstd-compressed like Inspect
- relabel: make a one-epoch log epoch k of a run

Only `header` is imported here: `zipio` and `relabel` load inspect_ai's zip support, which
costs the import of inspect_ai itself.
"""

from .header import is_finished, read_header, sample_error

__all__ = ["is_finished", "read_header", "sample_error"]
