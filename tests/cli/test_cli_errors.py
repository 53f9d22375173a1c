"""Tracebacks are for bugs only: refusals are one line (exit 2), a bug is one line naming
the file that holds its traceback (exit 1)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ct_fleet.cli.main import cli
from ct_fleet.errors import BadInput


@pytest.fixture
def command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("CT_FLEET_RUNS", str(tmp_path / "runs"))
    added = []

    def add(fn):
        cmd = click.command(name=f"t-{fn.__name__}")(fn)
        cli.add_command(cmd)
        added.append(cmd.name)
        return cmd.name

    yield add
    for name in added:
        cli.commands.pop(name, None)


def test_a_bug_prints_one_line_and_writes_the_traceback(command, tmp_path: Path):
    def boom() -> None:
        raise RuntimeError("kaboom\nsecond line")

    result = CliRunner().invoke(cli, [command(boom)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unexpected RuntimeError: kaboom" in lines[0] and "Traceback" not in result.stderr
    (report,) = (tmp_path / "runs" / "crashes").glob("crash-*.txt")
    assert str(report) in lines[0]
    text = report.read_text()
    assert "Traceback" in text and "in boom" in text and "second line" in text


def test_bad_input_is_one_line_and_exit_2_even_with_markup_like_text(command):
    def refuse() -> None:
        raise BadInput("value [/bold] is not [red]ok[/red]\nignored second line")

    result = CliRunner().invoke(cli, [command(refuse)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["error: value [/bold] is not [red]ok[/red]"]


def test_usage_errors_are_one_line():
    result = CliRunner().invoke(cli, ["eval", "--epochs", "many"], prog_name="ct-fleet")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "'many' is not a valid integer" in line and "ct-fleet eval --help" in line


def test_a_report_of_an_unknown_fleet_is_a_one_line_refusal(command, tmp_path: Path):
    result = CliRunner().invoke(cli, ["report", "0123456789ab"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "no fleet 0123456789ab in" in line and "where its fleet ran" in line
