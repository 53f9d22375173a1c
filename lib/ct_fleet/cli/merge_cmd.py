"""`ct-fleet merge`: merge a fleet's results, or any directory of one-sample .eval logs."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from ..errors import BadInput
from ..protocol import Manifest, run_layout
from .console import console, err
from .display import summary_table


@click.command(name="merge")
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o", "--out", type=click.Path(file_okay=False, path_type=Path), help="output directory (default SRC/merged)"
)
def merge_command(src: Path, out: Path | None) -> None:
    """Merge one-sample .eval logs into one Inspect run per task.

    SRC is a fleet's run directory (runs/FLEET_ID: its manifest gives each task's
    intended samples, epochs and header) or any directory of .eval logs. Streams: sample
    entries are copied without being decoded, so memory stays flat. Exits 1 when a
    merged run is not a success (samples missing, or errors beyond fail_on_error).
    """
    from ..controller.fleet import merge_fleet
    from ..merge import merge_dir

    skipped: list[tuple[Path, str]] = []

    def skip(path: Path, why: str) -> None:
        skipped.append((path, why))

    manifest_path = src / run_layout.MANIFEST
    if manifest_path.is_file():
        try:
            manifest = Manifest.from_json(manifest_path.read_text())
        except ValueError as exc:
            raise BadInput(f"{manifest_path}: {exc}") from None
        merged = merge_fleet(manifest, src, out, on_skip=skip)
    else:
        merged = merge_dir(src, out or src / run_layout.MERGED, on_skip=skip)
    for path, why in skipped:
        err.print(f"[yellow]left out[/] {escape(str(path))}: {escape(why)}", highlight=False, soft_wrap=True)
    if not merged:
        raise BadInput(f"no readable .eval files under {src}")
    console.print(summary_table(merged))
    failed = [m for m in merged if m.status != "success"]
    for m in failed:
        err.print(f"[bold red]{m.task}: status {m.status}[/] ({m.why})", highlight=False, soft_wrap=True)
    if failed:
        sys.exit(1)
