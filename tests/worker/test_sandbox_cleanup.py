"""ct_fleet.sandbox.cleanup against a real Docker: a killed job's compose projects go (with
their networks and volumes), nobody else's do, and no image is ever removed."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ct_fleet.sandbox import cleanup

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "settings"))

from toyarena.compose import compose_file  # noqa: E402


def docker(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], check=True, capture_output=True, text=True, timeout=120).stdout
    return out.split()


def up(project: str, compose: Path, *, job: str, instance: str, fleet: str, extra: Path | None = None) -> None:
    """`docker compose up` as Inspect runs it for a sample, inside a job's environment."""
    env = {**os.environ, "CT_JOB_ID": job, "CT_INSTANCE_ID": instance, "CT_FLEET_ID": fleet}
    files = ["-f", str(compose)] + (["-f", str(extra)] if extra else [])
    subprocess.run(
        ["docker", "compose", "-p", project, *files, "up", "-d", "--wait"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def project_leftovers(project: str) -> list[str]:
    label = ["--filter", f"label=com.docker.compose.project={project}"]
    return docker("ps", "-aq", *label) + docker("network", "ls", "-q", *label) + docker("volume", "ls", "-q", *label)


def test_a_killed_jobs_sandboxes_go_and_nothing_else(tmp_path: Path, docker_images: list[str]):
    run = uuid.uuid4().hex[:8]
    fleet, instance = f"fleet{run}", f"i-{run}"
    compose = compose_file("web")
    # A second file gives the victim's project a network and a volume, as a richer
    # setting's would (toyarena's services have neither: network_mode none).
    extra = tmp_path / "extra-compose.yaml"
    extra.write_text(
        "services:\n  helper:\n    image: " + docker_images[0] + "\n    command: [tail, -f, /dev/null]\n"
        "    labels:\n      ct-fleet.job: ${CT_JOB_ID:-}\n      ct-fleet.instance: ${CT_INSTANCE_ID:-}\n"
        "      ct-fleet.fleet: ${CT_FLEET_ID:-}\n    networks: [inner]\n    volumes: [data:/data]\n"
        "networks:\n  inner: {}\nvolumes:\n  data: {}\n"
    )
    victim, other_job, other_fleet = f"inspect-victim-{run}", f"inspect-other-{run}", f"inspect-fleet2-{run}"
    try:
        up(victim, compose, job="job-a", instance=instance, fleet=fleet, extra=extra)
        up(other_job, compose, job="job-b", instance=instance, fleet=fleet)
        up(other_fleet, compose, job="job-a", instance=instance, fleet=f"other{run}")
        assert len(project_leftovers(victim)) == 4  # two containers, a network, a volume
        images_before = sorted(docker("image", "ls", "-q"))

        removed = cleanup.remove_sandboxes(job="job-a", instance=instance, fleet=fleet)

        assert removed == [victim]
        assert project_leftovers(victim) == []
        assert project_leftovers(other_job) and project_leftovers(other_fleet)
        assert sorted(docker("image", "ls", "-q")) == images_before
        assert cleanup.remove_sandboxes(job="job-a", instance=instance, fleet=fleet) == []  # idempotent

        # A terminated instance takes every sandbox it ran.
        assert sorted(cleanup.remove_sandboxes(instance=instance)) == sorted([other_job, other_fleet])
        assert project_leftovers(other_job) == [] and project_leftovers(other_fleet) == []
    finally:
        for project in (victim, other_job, other_fleet):
            cleanup.remove_projects([project])


def test_a_runs_end_takes_its_own_instances_sandboxes_not_those_of_the_same_fleet_elsewhere(
    docker_images: list[str],
):
    """Two run directories on one machine may run a fleet of the same id (same code and
    command): the end of one removes the sandboxes of its own instances only."""
    run = uuid.uuid4().hex[:8]
    fleet, ours, theirs = f"fleet{run}", f"i-a{run}", f"i-b{run}"
    compose = compose_file("web")
    mine, elsewhere = f"inspect-mine-{run}", f"inspect-elsewhere-{run}"
    try:
        up(mine, compose, job="job-a", instance=ours, fleet=fleet)
        up(elsewhere, compose, job="job-a", instance=theirs, fleet=fleet)
        assert cleanup.remove_sandboxes({ours, "i-gone"}, fleet=fleet) == [mine]
        assert project_leftovers(mine) == [] and project_leftovers(elsewhere)
    finally:
        cleanup.remove_projects([mine, elsewhere])


def test_labels_are_required():
    with pytest.raises(ValueError, match="at least one"):
        cleanup.remove_sandboxes()
    with pytest.raises(ValueError, match="at least one"):
        cleanup.remove_sandboxes(job="")
