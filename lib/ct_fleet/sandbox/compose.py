"""The images a setting's compose files name: what a fleet needs on its workers.

Read with plain YAML (no Docker needed, so the AMI plan works on any machine). An image
name that compose would interpolate (`${TAG}`) cannot be listed ahead of a run and is
refused, naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml


class ComposeError(ValueError):
    """A compose file that does not name its images plainly; the message names the file."""


def images_in(path: Path) -> list[str]:
    """Every service's `image:` in one compose file, in file order."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ComposeError(f"{path}: no such compose file") from None
    except yaml.YAMLError as exc:
        raise ComposeError(f"{path}: not valid YAML ({exc})") from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise ComposeError(f"{path}: no services")
    images = []
    for name, service in services.items():
        image = service.get("image") if isinstance(service, dict) else None
        if not isinstance(image, str) or not image:
            # A build-only service has no image to bake; the AMI cannot carry it.
            raise ComposeError(f"{path}: service {name} names no image (give it image:)")
        if "$" in image:
            raise ComposeError(f"{path}: service {name}: image {image!r} is interpolated; name it plainly")
        images.append(image)
    return images


def images_of(paths: Iterable[Path]) -> list[str]:
    """The images of several compose files, each once, in first-seen order."""
    return list(dict.fromkeys(image for path in paths for image in images_in(path)))
