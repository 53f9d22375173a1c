"""The live progress panel (cli/display.py) on a terminal: drawn when its counts change, not
on a timer, at most every REDRAW seconds, and always with the last counts when it stops."""

from __future__ import annotations

import io

from rich.console import Console

from ct_fleet.cli.display import LiveProgress
from ct_fleet.controller.reporting import Progress


def progress(done: int) -> Progress:
    return Progress(
        total=50, done=done, failed=0, dead=0, queued=50 - done, running=0, workers=2, elapsed=1.0, eta=None
    )


def test_the_panel_draws_changes_at_its_pace_and_the_last_counts_at_the_end() -> None:
    out = io.StringIO()
    live = LiveProgress(Console(file=out, force_terminal=True, width=160))
    live.REDRAW = 3600.0  # every update after the first falls within it: only stop() draws again
    with live:
        for done in range(1, 51):
            live.update(progress(done))
        live.update(progress(50))  # unchanged: nothing to draw
    text = out.getvalue()
    frames = text.split("fleet progress")[1:]
    assert "1/50" in frames[0] and "50/50" in frames[-1]  # the first counts, and the last ones at stop
    assert "25/50" not in text and len(frames) <= 3  # (rich's own stop draws the last frame once more)


def test_an_unchanged_panel_is_not_drawn_again() -> None:
    out = io.StringIO()
    live = LiveProgress(Console(file=out, force_terminal=True, width=160))
    live.REDRAW = 0.0
    with live:
        for _ in range(5):
            live.update(progress(7))
        live.update(progress(8))
    text = out.getvalue()
    assert text.count("7/50") == 1 and "8/50" in text.split("fleet progress")[-1]
