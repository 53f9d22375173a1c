"""docs/reference.md is what ct_fleet.cli.reference renders from the definitions (the click
group and protocol/knobs.py): a command, option or knob changed without `bin/gen-reference`
fails here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from ct_fleet.cli.main import CtFleetGroup, cli
from ct_fleet.cli.reference import REGENERATE, render
from ct_fleet.protocol.knobs import Ec2Config, knob

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_the_reference_page_is_current():
    page, now = PAGE.read_text(), render()
    first = next(
        (f"-{a}\n+{b}" for a, b in zip(page.splitlines(), now.splitlines(), strict=False) if a != b), "its length"
    )
    assert page == now, f"docs/reference.md is stale: run {REGENERATE} and commit it (first difference: {first})"


def test_the_page_follows_a_new_knob_and_a_new_command():
    @dataclass(frozen=True)
    class MoreKnobs(Ec2Config):
        shiny_knob: int = knob(7, "a knob another branch added", worker="SHINY")

    @click.command(name="shiny")
    @click.option("--sparkle", default=3, help="how much")
    def shiny() -> None:
        """A command another branch added."""

    group = CtFleetGroup(name="ct-fleet", commands={**cli.commands, "shiny": shiny}, help=cli.help)
    page = render(group, MoreKnobs)
    assert page != render()
    assert "| `shiny_knob` | int | `7` | a knob another branch added | fleet.env `SHINY` |" in page
    assert "### `ct-fleet shiny`" in page and "| `--sparkle` `INTEGER` | `3` | how much |" in page


def test_every_knob_and_command_is_on_the_page():
    page = render()
    for name in Ec2Config.__dataclass_fields__:
        assert f"| `{name}` |" in page
    for name in ("eval", "fleets", "status", "report", "view", "logs", "ssh", "merge", "run-job"):
        assert f"### `ct-fleet {name}`" in page
    assert "### `ct-fleet cloud build-ami`" in page and "### `ct-fleet cloud status`" in page
