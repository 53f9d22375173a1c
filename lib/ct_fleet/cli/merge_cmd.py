"""`ct-fleet merge`: merge any directory of one-sample .eval logs."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput
from .console import console
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

    merged = merge_dir(src, out or src / "merged")
    if not merged:
        raise BadInput(f"no .eval files under {src}")
    console.print(summary_table(merged))
