"""The packages a fleet's tasks need (-r/--requirements, setting_requirements), for the
controller's probe: installed once per set of requirements into a directory beside this
venv (the venv stays as locked), as workers install them (worker/settings-pull.sh: the
same uv, the same lock as constraints), so a task that loads here loads on the workers.

Each set is installed in `<sites_dir>/<key>/site-packages`: Inspect takes a module for part
of an installed package only when its file lies under a `sys.path` entry whose path holds
"site-packages" (inspect_ai/_util/package.py, package_path_is_in_site_packages), and only
then names its tasks `package/task` and records the package's version in the log's
`packages`. Local instances install the same set in the same place, under the same key
(worker/settings-pull.sh, site_key): one install per machine, the probe's included. An
install runs under a lock per key, into a temp directory renamed into place when
complete, so two runs or instances installing the same set at once never see half of one.

A requirements file given to -r lists requirements and wheel paths, one per line; pip's
options (-e, --index-url, -r) are refused: workers install words, not pip command lines.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...errors import BadInput
from ...paths import REPO_ROOT, sites_dir
from .safe_yaml import read_text
from .setting_plan import Requirements, plan_requirements

REQUIREMENTS_FILE_MAX = 64 * 1024
INSTALL_TIMEOUT = 900
# The layout of an installed set, first in its key's text: a set installed by an earlier
# layout (no site-packages directory) is never taken for one of this layout.
SITE_LAYOUT = "ct-fleet site 1"
SITE_PACKAGES = "site-packages"
COMPLETE = ".complete"  # beside site-packages, written last: the set is whole


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
    return sites_dir(environ)


def site_key(specs: Sequence[str], wheels: Sequence[Path], venv: str, lock: Path) -> str:
    """The directory name of one set of requirements installed for `venv`'s Python under
    `lock`. worker/settings-pull.sh (site_key) computes the same from the same text: change
    them together (tests/bats/local_steps.bats compares them)."""
    lock_digest = hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else "-"
    items = [f"spec {spec}" for spec in specs]
    items += [f"wheel {wheel.name} {hashlib.sha256(wheel.read_bytes()).hexdigest()}" for wheel in wheels]
    text = "".join(f"{line}\n" for line in [SITE_LAYOUT, f"venv {venv}", f"lock {lock_digest}", *sorted(items)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def install(reqs: Requirements, environ: Mapping[str, str]) -> Path | None:
    """The site-packages directory holding the fleet's requirements (installed now, or by
    an earlier run or a local instance of the same ones); None when there are none.
    `environ`: the run's (its cache directory, and CT_FLEET_UV, the uv bin/ct-fleet found)."""
    if not reqs.specs and not reqs.wheels:
        return None
    lock = REPO_ROOT / "requirements.lock"
    key = site_key(reqs.specs, reqs.wheels, sys.prefix, lock)
    root = overlay_dir(environ)
    dest = root / key
    if (dest / COMPLETE).exists():
        return dest / SITE_PACKAGES
    root.mkdir(parents=True, exist_ok=True)
    uv = environ.get("CT_FLEET_UV") or shutil.which("uv", path=environ.get("PATH"))
    if not uv:
        raise BadInput("installing the fleet's requirements needs uv: run ct-fleet as bin/ct-fleet, which finds it")
    with open(root / f".{key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another run or a local instance may be installing these
        if not (dest / COMPLETE).exists():
            _install_locked(uv, reqs, lock, root, key)
    return dest / SITE_PACKAGES


def _install_locked(uv: str, reqs: Requirements, lock: Path, root: Path, key: str) -> None:
    # Whoever holds the lock is the only one installing this key: a temp directory of the
    # key still here is a killed install's.
    for stale in root.glob(f".{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    target = work / SITE_PACKAGES
    cmd = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", sys.executable, "--target", str(target)]
    if lock.is_file():
        cmd += ["--constraints", str(lock)]  # pinned to the lock wherever they overlap it
    cmd += [*reqs.specs, *map(str, reqs.wheels)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
        if proc.returncode != 0:
            said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
            cause = " ".join(said[-2:])[:400] if said else f"uv exited {proc.returncode}"
            raise BadInput(f"the fleet's requirements do not install: {cause}")
        (work / COMPLETE).touch()
        try:
            work.rename(root / key)
        except OSError:
            pass  # installed meanwhile by one that took no lock: theirs is as good
    except subprocess.TimeoutExpired:
        raise BadInput(f"installing the fleet's requirements took over {INSTALL_TIMEOUT}s") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def installed_site(requirements: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """The install of these requirements (-r values, expanded) this machine's local
    instances share: the controller's, or made now."""
    return install(plan_requirements(list(requirements)), environ)
