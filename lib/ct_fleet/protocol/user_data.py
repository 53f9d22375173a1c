"""A worker's EC2 user-data: worker/user-data.sh with two base64 values put in.

FLEET_ENV is fleet.env itself (FleetEnv.to_env_file), BOOT_KIT a tar.gz of the scripts that
bootstrap needs before it has fetched the code (BOOT_KIT_FILES). Both are base64, whose
alphabet holds no quote, newline or `$`: whatever a setting contains, it reaches the
worker as data and never as shell. The kit is built deterministically, so the same
checkout renders the same user-data.
"""

from __future__ import annotations

import base64
import gzip
import io
import tarfile

from ..errors import BadInput
from ..paths import REPO_ROOT
from .fleet_env import FleetEnv

TEMPLATE = "worker/user-data.sh"
# What bootstrap.sh runs before fetch-code has unpacked the code, and on any failure.
BOOT_KIT_FILES = (
    "lib/bash/ct.sh",
    "worker/lib.sh",
    "worker/bootstrap.sh",
    "worker/fetch-code.sh",
    "worker/upload-log.sh",
    "worker/shutdown-instance.sh",
)
# EC2 refuses user-data over 16 KB (counted before its base64 for the API).
USER_DATA_LIMIT = 16 * 1024


def boot_kit() -> bytes:
    """The kit as a tar.gz: fixed order, owner and times, so equal files give equal bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in BOOT_KIT_FILES:
            data = (REPO_ROOT / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.startswith("worker/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def render_user_data(env: FleetEnv) -> str:
    """The user-data every worker of this fleet boots with; BadInput if EC2 would refuse it."""
    fleet_env = env.to_env_file().encode("utf-8", errors="surrogateescape")
    text = (REPO_ROOT / TEMPLATE).read_text()
    for placeholder in ("@FLEET_ENV@", "@BOOT_KIT@"):
        if text.count(placeholder) != 1:
            raise RuntimeError(f"{TEMPLATE} must hold {placeholder} exactly once")
    user_data = text.replace("@FLEET_ENV@", _b64(fleet_env)).replace("@BOOT_KIT@", _b64(boot_kit()))
    size = len(user_data.encode())
    if size > USER_DATA_LIMIT:
        raise BadInput(
            f"the workers' user-data would be {size} bytes, over EC2's {USER_DATA_LIMIT}: "
            "shorten the fleet settings (fewer or shorter --extra-src trees, settings, secret names)"
        )
    return user_data
