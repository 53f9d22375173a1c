"""Colour on a terminal, none when NO_COLOR is set (https://no-color.org): the real CLI on a
pseudo-terminal, so that rich sees what it sees on a person's screen."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# An SGR sequence that sets a colour: 30-37/90-97 (foreground), 38;... (extended).
COLOUR = re.compile(rb"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7])[;m]")


def on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """(exit status, everything written to the terminal) of bin/ct-fleet ARGS."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [str(REPO / "bin" / "ct-fleet"), *args], stdin=child, stdout=child, stderr=child, env=env, cwd=REPO
    )
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(timeout=120), out


@pytest.mark.parametrize("no_color", [False, True])
def test_a_terminal_gets_colour_unless_no_color_is_set(tmp_path: Path, no_color: bool) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "junk.eval").write_bytes(b"not a log")  # "left out" (in yellow), then a refusal
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    env.update(TERM="xterm-256color", CT_FLEET_RUNS=str(tmp_path / "runs"), **({"NO_COLOR": "1"} if no_color else {}))
    code, out = on_a_terminal(["merge", str(results)], env)
    assert code == 2 and b"left out" in out and b"no readable .eval files" in out, out
    assert bool(COLOUR.search(out)) is not no_color, out


def test_the_consoles_read_the_environment_when_used_not_when_imported():
    """A process that imports the CLI and only then gets its environment (the test suite's
    CLI forker) must print by that environment."""
    probe = (
        "import os\n"
        "from ct_fleet.cli.console import console, err\n"
        "os.environ['NO_COLOR'] = '1'\n"
        "print(console.no_color, err.no_color, err.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["True", "True", "True"]
