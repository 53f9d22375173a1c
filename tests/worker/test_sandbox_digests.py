"""ct_fleet.sandbox.digests: the images a job's sandboxes ran, with the local Docker's ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ct_fleet.sandbox import digests

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "settings"))

from toyarena.compose import compose_file  # noqa: E402
from toyarena.images import image_ref  # noqa: E402


def test_a_jobs_images_come_from_its_compose_config(tmp_path: Path, docker_images: list[str]):
    config = str(compose_file("ops"))
    image_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", image_ref("ops")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Sandboxes without a compose file (local, a Dockerfile-less type) name no image.
    got = digests.job_images([("docker", config), ("local", None), ("docker", config), ("vm", {"x": 1})])
    assert got == [{"ref": image_ref("ops"), "id": image_id, "repo_digests": []}]
    gone = tmp_path / "gone-compose.yaml"
    gone.write_text('services:\n  default: {image: "ct-fleet/toyarena-nope:0"}\n')
    assert digests.job_images([("docker", str(gone))]) == [
        {"ref": "ct-fleet/toyarena-nope:0", "id": None, "repo_digests": []}
    ]


def test_the_sidecar_hands_them_to_the_worker_once(tmp_path: Path):
    out = tmp_path / "job.eval"
    assert digests.pop_sidecar(out) == []
    digests.write_sidecar(out, [{"ref": "a:1", "id": "sha256:x", "repo_digests": []}])
    assert digests.pop_sidecar(out) == [{"ref": "a:1", "id": "sha256:x", "repo_digests": []}]
    assert digests.pop_sidecar(out) == []
    digests.write_sidecar(out, [])
    assert not digests.sidecar(out).exists()
