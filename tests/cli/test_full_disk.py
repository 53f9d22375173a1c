"""A full disk is said as such: which disk, what needed the room, and how to give it some;
exit 1, no traceback, and no half-written file left behind (the disk is a small tmpfs)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fleet import LOCAL, finish, processes_in, start


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)  # CI runs as root
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize(
    "full, needs",
    [("runs", "set CT_FLEET_RUNS to another disk"), ("tmp", "set TMPDIR to another disk")],
)
def test_a_full_disk_names_the_disk_and_what_needs_the_room(tmp_path: Path, tiny_disk: Path, full: str, needs: str):
    runs = tiny_disk / "runs" if full == "runs" else tmp_path / "runs"
    tmpdir = tiny_disk if full == "tmp" else tmp_path
    code, out, err = finish(start(runs, "--task-file", "smoke", *LOCAL, TMPDIR=str(tmpdir)), timeout=300)
    assert code == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"error: no space left on the disk at {tiny_disk} "), err
    assert needs in errors[0], err
    assert "a bug" not in err and "Traceback" not in err
    left = [p for p in tiny_disk.rglob("*") if p.is_file() and p.name != "controller.lock"]
    assert left == [], "no half-written file (tarball, crash report) stays on the full disk"
    assert processes_in(runs) == []
