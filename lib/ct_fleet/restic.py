"""restic for Inspect's checkpoints, found on this machine instead of downloaded.

Inspect backs a checkpointed sample up with restic, which it downloads from the internet
on first use unless `<Inspect's cache>/bin/restic_<its version>_<platform>` exists (it runs
that file as it is, with no checksum). A fleet has no internet at run time, so the restic
the machine has (Debian trixie's 0.18 on the local fleet and in bin/test, the same baked
into the worker AMI by packer/scripts/install-restic.sh) is linked there before a job runs.

A restic that runs but is too old is worse than none: Inspect calls `backup --no-scan`
(restic >= 0.15), every checkpoint fails, and the sample still ends in success. So a
restic is "working" only when its `backup` knows every flag Inspect passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

# What a restic must take for Inspect's checkpoints (util/_restic/ops.py's backup call).
NEEDED_FLAGS: Final = ("--no-scan",)
INSTALL_HINT: Final = "install restic >= 0.15 (Debian trixie: apt-get install -t trixie restic)"


class NoRestic(RuntimeError):
    """No restic that Inspect's checkpoints can use."""


@dataclass(frozen=True)
class Restic:
    path: Path
    version: str


def find(path_env: str | None) -> Restic:
    """The working restic on `path_env` (a PATH value), or NoRestic saying why and what to do."""
    found = shutil.which("restic", path=path_env)
    if found is None:
        raise NoRestic(f"--checkpoint needs restic and none is on PATH: {INSTALL_HINT}")
    return check(Path(found))


def check(binary: Path) -> Restic:
    """`binary` as a Restic if it runs and its backup takes Inspect's flags, else NoRestic."""
    try:
        version = _run(binary, "version")
        backup_help = _run(binary, "backup", "--help")
    except (OSError, subprocess.SubprocessError) as exc:
        raise NoRestic(f"--checkpoint needs a working restic; {binary} does not run ({exc}): {INSTALL_HINT}") from exc
    missing = [flag for flag in NEEDED_FLAGS if flag not in backup_help]
    words = version.split()
    number = words[1] if len(words) > 1 else version.strip()
    if missing:
        raise NoRestic(
            f"--checkpoint needs restic >= 0.15; {binary} is {number} (its backup lacks {', '.join(missing)}): "
            f"{INSTALL_HINT}"
        )
    return Restic(binary.resolve(), number)


def _run(binary: Path, *args: str) -> str:
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def provide(restic: Restic) -> Path:
    """Link Inspect's restic cache path to `restic`, so that Inspect downloads nothing.

    A file already there that is not our link (Inspect's own download) is left alone: it is
    the version Inspect was built for."""
    from .inspect_private import restic_cache_path

    target = restic_cache_path()
    if target.is_symlink() and target.resolve() == restic.path:
        return target
    if target.exists() and not target.is_symlink():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Atomically: two jobs of one worker may start at once.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(restic.path)
    tmp.replace(target)
    return target
