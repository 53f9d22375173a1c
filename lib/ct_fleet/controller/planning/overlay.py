"""The packages a fleet's tasks need (-r/--requirements, setting_requirements), for the
controller's probe: installed once per set of requirements into a directory beside this
venv (the venv stays as locked), as workers install them (worker/settings-pull.sh: the
same uv, the same lock as constraints), so a task that loads here loads on the workers.

A requirements file given to -r lists requirements and wheel paths, one per line; pip's
options (-e, --index-url, -r) are refused: workers install words, not pip command lines.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...errors import BadInput
from ...paths import REPO_ROOT
from .safe_yaml import read_text
from .setting_plan import Requirements

REQUIREMENTS_FILE_MAX = 64 * 1024
INSTALL_TIMEOUT = 900


def expand(values: Sequence[str]) -> list[str]:
    """-r values: a requirements file becomes its lines; a requirement or a wheel stays itself."""
    out: list[str] = []
    for value in values:
        path = Path(value).expanduser()
        if value.endswith(".whl") or not path.is_file():
            out.append(value)
            continue
        text = read_text(path, max_bytes=REQUIREMENTS_FILE_MAX, what="requirements file")
        for number, line in enumerate(text.splitlines(), 1):
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("-"):
                raise BadInput(
                    f"{path} line {number}: pip options ({line.split()[0]}) are not supported; "
                    "list requirements (name[extras]>=version) and wheel paths, one per line"
                )
            wheel = path.parent / line
            out.append(str(wheel) if line.endswith(".whl") and not Path(line).is_absolute() else line)
    return out


def overlay_dir(environ: Mapping[str, str]) -> Path:
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ct-fleet" / "overlays"


def install(reqs: Requirements, environ: Mapping[str, str]) -> Path | None:
    """The directory holding the fleet's requirements (installed now, or by an earlier run
    of the same ones); None when there are none. `environ`: the run's (its cache directory,
    and CT_FLEET_UV, the uv bin/ct-fleet found)."""
    if not reqs.specs and not reqs.wheels:
        return None
    lock = REPO_ROOT / "requirements.lock"
    key_parts = [reqs.identity, sys.executable, hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else ""]
    key = hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()[:16]
    root = overlay_dir(environ)
    dest = root / key
    if (dest / ".complete").exists():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    uv = environ.get("CT_FLEET_UV") or shutil.which("uv", path=environ.get("PATH"))
    if not uv:
        raise BadInput("installing the fleet's requirements needs uv: run ct-fleet as bin/ct-fleet, which finds it")
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    cmd = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", sys.executable, "--target", str(work)]
    if lock.is_file():
        cmd += ["--constraints", str(lock)]  # pinned to the lock wherever they overlap it
    cmd += [*reqs.specs, *map(str, reqs.wheels)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
        if proc.returncode != 0:
            said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
            cause = " ".join(said[-2:])[:400] if said else f"uv exited {proc.returncode}"
            raise BadInput(f"the fleet's requirements do not install: {cause}")
        (work / ".complete").touch()
        try:
            work.rename(dest)
        except OSError:
            pass  # another run installed the same ones meanwhile: theirs is as good
    except subprocess.TimeoutExpired:
        raise BadInput(f"installing the fleet's requirements took over {INSTALL_TIMEOUT}s") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
