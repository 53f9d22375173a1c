"""The image digests a job's sandboxes ran, recorded with its result so a run is reproducible.

Read from the compose files of the log's samples (their sandbox config) and the local
Docker: the image id (the digest of its config, which pins the content of a locally built
image) and, for pulled images, the registry digests it was pulled by.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .compose import ComposeError, images_of
from .docker_cli import docker


def compose_configs(sandboxes: Iterable[tuple[str, Any]]) -> list[Path]:
    """The compose files among (sandbox type, config) pairs."""
    paths = []
    for _, config in sandboxes:
        if isinstance(config, str) and config.endswith((".yaml", ".yml")) and Path(config).is_file():
            paths.append(Path(config))
    return list(dict.fromkeys(paths))


def image_digests(refs: list[str]) -> list[dict[str, Any]]:
    """[{ref, id, repo_digests}] per ref; id is None for an image the local Docker lacks."""
    out = []
    for ref in refs:
        result = docker("image", "inspect", ref)
        info: dict[str, Any] = {}
        if result is not None and result.returncode == 0:
            info = (json.loads(result.stdout) or [{}])[0]
        out.append({"ref": ref, "id": info.get("Id"), "repo_digests": info.get("RepoDigests") or []})
    return out


def job_images(sandboxes: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    """What a job's sandboxes ran: the images of its compose files, with their digests."""
    try:
        refs = images_of(compose_configs(sandboxes))
    except ComposeError:
        return []
    return image_digests(refs)


def sidecar(out: Path) -> Path:
    """Where the runner leaves the images of the job whose log is `out`, for the worker."""
    return out.with_suffix(".images.json")


def write_sidecar(out: Path, images: list[dict[str, Any]]) -> None:
    if images:
        sidecar(out).write_text(json.dumps(images))


def pop_sidecar(out: Path) -> list[dict[str, Any]]:
    """The images the runner recorded for `out` (removing the file), [] when none."""
    path = sidecar(out)
    try:
        images: list[dict[str, Any]] = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    path.unlink(missing_ok=True)
    return images
