"""The run report's workers: launch, boot and readiness in the order they happened, although
a bootstrap log's times are whole seconds (cut down) and the launch is timed exactly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ct_fleet.controller.reporting.run_report import _workers
from ct_fleet.protocol import run_layout

T0 = 1_800_000_000.0
LAUNCHED = T0 + 3.59  # 3.59 s into the run


def _boot_log(run_dir: Path, instance_id: str, *stamps: str) -> None:
    logs = run_dir / run_layout.BOOT_LOGS
    logs.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{stamps[0]} [bootstrap.sh] step bootstrap: start",
        f"{stamps[0]} [fetch-code] step fetch-code: start",
        f"{stamps[1]} [run-worker] step run-worker: start",
    ]
    (logs / f"{instance_id}-bootstrap.log").write_text("\n".join(lines) + "\n")


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_worker_ready_within_the_second_of_its_launch_is_not_ready_before_it(tmp_path: Path) -> None:
    fast, slow = "i-fast", "i-slow"
    # Both log their boot in the launch's second, stamped before it; one starts its loop then too.
    _boot_log(tmp_path, fast, _stamp(LAUNCHED), _stamp(LAUNCHED))
    _boot_log(tmp_path, slow, _stamp(LAUNCHED), _stamp(LAUNCHED + 2))
    events = [{"event": "launched", "instance_id": i, "at": LAUNCHED, "why": "first", "slots": 2} for i in (fast, slow)]
    workers = {w.instance_id: w for w in _workers(tmp_path, events, [], T0)}
    for w in workers.values():
        assert w.launched is not None and w.booted is not None and w.ready is not None
        assert w.launched <= w.booted <= w.ready, w
    assert workers[fast].ready == workers[fast].launched
    # A later stamp is kept as it is: whole seconds after the run's start.
    assert workers[slow].ready == int(LAUNCHED + 2) - T0


def test_an_adopted_worker_keeps_its_logs_times(tmp_path: Path) -> None:
    """A worker an earlier controller launched has no launch here: its boot is its log's."""
    _boot_log(tmp_path, "i-old", _stamp(T0 - 30), _stamp(T0 - 20))
    attempts = [{"instance_id": "i-old"}]
    (w,) = _workers(tmp_path, [], attempts, T0)
    assert (w.launched, w.booted, w.ready) == (None, -30.0, -20.0)
