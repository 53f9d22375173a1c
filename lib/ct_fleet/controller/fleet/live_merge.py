"""runs/<fleet>/merged/ while the run goes on: the results so far, merged again and again.

A thread of its own merges the verified results (jobs/*.evaljob) into merged/ whenever new
ones arrived, waiting at least `interval` seconds and ten times its own last merge between
two, so it takes at most about a tenth of the controller's time however large the run. Its
logs say status "started", which Inspect shows as running, with every sample so far; the
end of run's merge replaces them with the finished ones. Both go through one FleetMerge,
whose spool each merge only tops up with the results that are new since the one before:
the end reads the last few results and writes the logs, not the whole merge again. Each
file is written whole and renamed into place (merge/write.py), so a crash mid-merge
leaves the last whole log.
"""

from __future__ import annotations

import json
import threading
import time
from types import TracebackType

from ...protocol import run_layout
from . import merging

# A merge takes at most this share of the time between two (so at most ~10% of the run).
BUSY_SHARE = 10


class LiveMerge:
    def __init__(self, fleet_merge: merging.FleetMerge, interval: int) -> None:
        self.fleet_merge, self.run_dir, self.interval = fleet_merge, fleet_merge.run_dir, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._merged_count = -1

    def __enter__(self) -> LiveMerge:
        if self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name="live-merge", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        # The final merge writes the same files: wait for one in progress. Not on Ctrl-C or
        # SIGTERM, which merge nothing more: stopping what bills comes first.
        if self._thread is not None and (kind is None or issubclass(kind, Exception)):
            self._thread.join()

    def _loop(self) -> None:
        wait = float(self.interval)
        while not self._stop.wait(wait):
            count = len(run_layout.job_logs(self.run_dir))
            if count in (0, self._merged_count):  # no result yet, or none new: nothing to show
                continue
            # inspect_ai's import (seconds, once) is no part of a merge's cost: timed, it would
            # hold the next merge back for ten times as long.
            from ... import merge  # noqa: F401

            began = time.monotonic()
            try:
                merged = self.fleet_merge.merge(live=True)
            except Exception as exc:  # a result moved away mid-read, a full disk: the next look retries
                self._record({"at": time.time(), "error": f"{type(exc).__name__}: {exc}"})
                continue
            took = time.monotonic() - began
            self._merged_count = count
            self._record(
                {"at": time.time(), "seconds": round(took, 3), "samples": sum(m.samples_present for m in merged)}
            )
            wait = max(float(self.interval), BUSY_SHARE * took)

    def _record(self, entry: dict[str, object]) -> None:
        # One line per live merge: what the run report and the tests read of them.
        with open(self.run_dir / run_layout.LIVE_MERGES, "a") as fh:
            fh.write(json.dumps(entry) + "\n")
