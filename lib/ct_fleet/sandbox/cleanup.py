"""Remove the sandbox containers of a job that did not end normally, with their networks and
volumes.

Inspect's docker sandbox tears a sample down itself when the eval ends, even with an error;
a job process that is killed (timeout) or dies (os._exit, OOM) leaves its compose project
running. Compose files of fleet settings label their services with the job, instance and
fleet ids, interpolated from the job's environment (CT_JOB_ID, CT_INSTANCE_ID, CT_FLEET_ID;
see examples/settings/toyarena/compose.py), which is what these filters match. Images are
never touched: the next job runs the same ones.
"""

from __future__ import annotations

from collections.abc import Collection

from .docker_cli import docker, lines

LABEL_JOB = "ct-fleet.job"
LABEL_INSTANCE = "ct-fleet.instance"
LABEL_FLEET = "ct-fleet.fleet"
PROJECT_LABEL = "com.docker.compose.project"


def _filters(labels: dict[str, str]) -> list[str]:
    args = []
    for key, value in sorted(labels.items()):
        args += ["--filter", f"label={key}={value}"]
    return args


def labelled_containers(instances: Collection[str] | None = None, **labels: str) -> list[tuple[str, str]]:
    """(container id, compose project) of every container, running or not, with all these
    labels, and with one of these instance ids when `instances` is given."""
    wanted = {
        {"job": LABEL_JOB, "instance": LABEL_INSTANCE, "fleet": LABEL_FLEET}[key]: value
        for key, value in labels.items()
        if value
    }
    if not wanted:
        raise ValueError("labelled_containers needs at least one of job, instance, fleet")
    found = []
    fmt = f'{{{{.ID}}}}\t{{{{.Label "{PROJECT_LABEL}"}}}}\t{{{{.Label "{LABEL_INSTANCE}"}}}}'
    for line in lines("ps", "-a", *_filters(wanted), "--format", fmt):
        container, project, instance = (line.split("\t") + ["", ""])[:3]
        if instances is None or instance in instances:
            found.append((container, project))
    return found


def remove_projects(projects: list[str]) -> None:
    """Remove what compose created for these projects: containers, then networks and volumes."""
    for project in projects:
        project_filter = ["--filter", f"label={PROJECT_LABEL}={project}"]
        containers = lines("ps", "-aq", *project_filter)
        if containers:
            docker("rm", "--force", "--volumes", *containers)
        networks = lines("network", "ls", "-q", *project_filter)
        if networks:
            docker("network", "rm", *networks)
        volumes = lines("volume", "ls", "-q", *project_filter)
        if volumes:
            docker("volume", "rm", "--force", *volumes)


def remove_sandboxes(instances: Collection[str] | None = None, **labels: str) -> list[str]:
    """Remove the compose projects whose containers carry these labels (and one of these
    instance ids, when given); returns the projects.

    remove_sandboxes(job=..., instance=..., fleet=...) after a killed job;
    remove_sandboxes(instance=...) when a local instance is terminated;
    remove_sandboxes(instances=..., fleet=...) when a local fleet's run ends: another run
    directory on this machine may run a fleet of the same id (same code and command) on
    the same Docker daemon, and its sandboxes are not this run's.
    """
    found = labelled_containers(instances, **labels)
    projects = sorted({project for _, project in found if project})
    loose = [container for container, project in found if not project]
    if loose:
        docker("rm", "--force", "--volumes", *loose)
    remove_projects(projects)
    return projects
