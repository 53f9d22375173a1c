"""Nothing a run starts outlives it: scratch directories of a controller killed with
SIGKILL are swept by the next one (named for their owner's pid)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ct_fleet import tempdirs


@pytest.mark.parametrize("kind", ["shipped", "merge"])
def test_a_killed_owners_scratch_directory_is_swept_by_the_next(tmp_path: Path, kind: str, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempdirs.tempfile, "tempdir", None)  # TMPDIR read again
    # A process that makes one and is killed before any cleanup can run
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal; from ct_fleet.tempdirs import owned_tempdir; "
            f"d = owned_tempdir({kind!r}); (d / 'big').write_bytes(b'x' * 1000); print(d, flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    left = Path(killed.stdout.strip())
    assert killed.returncode == -9 and left.is_dir() and left.parent == tmp_path
    mine = tempdirs.owned_tempdir(kind)  # the next run of that kind
    assert not left.exists() and mine.is_dir()
    assert tempdirs.owned_tempdir(kind).is_dir() and mine.is_dir()  # a live owner's is never swept
