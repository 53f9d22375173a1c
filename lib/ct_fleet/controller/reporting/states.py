"""What reporting reads of the job tracker (fleet/tracker.py): its states, as a read-only view.

Reporting sits below the running fleet, so it names the shape it needs instead of the class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class JobStates(Protocol):
    @property
    def state(self) -> Mapping[str, str]: ...

    @property
    def outcome(self) -> Mapping[str, str]: ...

    @property
    def dead_errors(self) -> Mapping[str, tuple[str, str]]: ...

    @property
    def last_error(self) -> Mapping[str, tuple[str, str]]: ...

    @property
    def finished(self) -> int: ...

    @property
    def failed(self) -> int: ...

    @property
    def failed_jobs(self) -> Mapping[str, None]:
        """Finished jobs whose outcome is "failed", in the order they failed."""
        ...
