"""`ct-fleet merge`: merge any directory of one-sample .eval logs."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from ..errors import BadInput
from .console import console, err
from .display import summary_table


@click.command(name="merge")
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o", "--out", type=click.Path(file_okay=False, path_type=Path), help="output directory (default SRC/merged)"
)
def merge_command(src: Path, out: Path | None) -> None:
    """Merge a directory of one-sample .eval logs into one Inspect run per task.

    Streams: sample entries are copied without being decoded, so memory stays flat.
    """
    from ..merge import merge_dir

    skipped: list[tuple[Path, str]] = []
    merged = merge_dir(src, out or src / "merged", on_skip=lambda path, why: skipped.append((path, why)))
    for path, why in skipped:
        err.print(f"[yellow]left out[/] {escape(str(path))}: {escape(why)}", highlight=False, soft_wrap=True)
    if not merged:
        raise BadInput(f"no readable .eval files under {src}")
    console.print(summary_table(merged))
