"""What a fleet's sandboxes need of Docker, decided at planning: nothing is touched.

Where instances run on this machine, fleet/docker.py readies Docker for these needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ...errors import BadInput
from ...sandbox.compose import ComposeError, images_of
from ...settings import SettingSources, find_setting
from .jobs import FleetTask


@dataclass(frozen=True)
class DockerNeeds:
    """What a fleet's sandboxes need of Docker, decided at planning (nothing is touched)."""

    required: bool = False  # some task runs a Docker sandbox
    images: list[str] = field(default_factory=list)  # the images its settings' compose files name
    builders: list[str] = field(default_factory=list)  # settings whose images bin/build-images builds
    # Plain tasks' compose files: their images are built (or pulled) before launch.
    compose_files: list[str] = field(default_factory=list)


def fleet_docker(
    fleet_tasks: Sequence[FleetTask],
    sources: SettingSources,
    plain_types: Iterable[str] = (),
    plain_compose: Sequence[str] = (),
) -> DockerNeeds:
    """Docker needs of a fleet: each setting task's compose files under its task args, and the
    sandbox types and compose files the plain tasks' probe saw. BadInput on a setting's
    compose file that names no image."""
    images: list[str] = []
    builders: list[str] = []
    for task in fleet_tasks:
        if task.setting is None:
            continue
        setting = find_setting(task.setting, sources)
        try:
            found = images_of(setting.compose_files(task.task_args))
        except ComposeError as exc:
            raise BadInput(str(exc)) from None
        images += found
        if found and setting.builds_images:
            builders.append(setting.name)
    images = list(dict.fromkeys(images))
    return DockerNeeds(
        required=bool(images) or "docker" in set(plain_types),
        images=images,
        builders=list(dict.fromkeys(builders)),
        compose_files=list(plain_compose),
    )
