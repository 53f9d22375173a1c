"""Which Docker images the worker AMI bakes: every image the settings' compose files name
(Setting.compose_files), plus the extras packer/images.txt lists for images no setting
of this repo names. Nothing about a setting's images is kept by hand.

An image a setting builds itself (its images.py plan, what bin/build-images makes
offline) is built on the builder from the repo's files; every other image is pulled
from its registry (packer/scripts/pull-images.sh).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..environment import inherited
from ..errors import BadInput
from ..paths import SETTINGS_DIR
from ..sandbox.compose import ComposeError, images_in
from ..settings import SettingSources, find_setting


@dataclass(frozen=True)
class AmiImage:
    ref: str
    source: str  # the setting whose compose file names it, or the extras file
    how: Literal["build", "pull"]


def setting_names() -> list[str]:
    """Every setting in the repo (a package under examples/settings)."""
    return sorted(p.name for p in SETTINGS_DIR.iterdir() if (p / "__init__.py").is_file())


def built_refs(setting: str) -> list[str]:
    """The refs bin/build-images makes for a setting (`python3 -m SETTING.images plan`)."""
    if not (SETTINGS_DIR / setting / "images.py").is_file():
        return []
    env = inherited({"PYTHONPATH": str(SETTINGS_DIR)})
    out = subprocess.run(
        [sys.executable, "-m", f"{setting}.images", "plan"], env=env, capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise BadInput(f"setting {setting}: cannot read its image plan ({out.stderr.strip()[-200:]})")
    return [line.split("\t")[1] for line in out.stdout.splitlines() if line.count("\t") >= 1]


def read_extra_images(path: Path) -> list[str]:
    """Image references listed in an extras file (packer/images.txt): one a line, # comments."""
    images: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) > 1:
            raise BadInput(f"{path}:{number}: one image per line, got {raw.strip()!r}")
        if line not in images:
            images.append(line)
    return images


def ami_images(
    settings: Sequence[str], extras_file: Path | None, sources: SettingSources | None = None
) -> list[AmiImage]:
    """The images to bake, each once: the settings' (in order, found in `sources`), then the extras."""
    found: dict[str, AmiImage] = {}
    for name in settings:
        setting = find_setting(name, sources or SettingSources())
        built = set(built_refs(name))
        for path in setting.compose_files(None):
            try:
                refs = images_in(path)
            except ComposeError as exc:
                raise BadInput(f"setting {name}: {exc}") from None
            for ref in refs:
                found.setdefault(ref, AmiImage(ref, name, "build" if ref in built else "pull"))
    if extras_file is not None:
        for ref in read_extra_images(extras_file):
            found.setdefault(ref, AmiImage(ref, extras_file.name, "pull"))
    return list(found.values())
