"""Reading and editing Inspect `.eval` logs at the byte level, shared by both sides.

- header: cheap checks without importing inspect_ai (is a log finished, did its sample fail)
- verify: does a result read in full (header and samples), checked before it counts
- zipio: zip entries copied raw (compressed bytes) or written zstd-compressed like Inspect
- reader: a small log read with one read and one zstd decompressor (the merge's pass 1)
- relabel: make a one-epoch log epoch k of a run

Only `header` is imported here: `zipio`, `reader` and `relabel` load inspect_ai's zip support, which
costs the import of inspect_ai itself.
"""

from .header import is_finished, read_header, read_model_usage, sample_error
from .verify import Expected, digest, is_readable, problem

__all__ = [
    "Expected",
    "digest",
    "is_finished",
    "is_readable",
    "problem",
    "read_header",
    "read_model_usage",
    "sample_error",
]
