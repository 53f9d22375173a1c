"""The worker AMI's image list comes from the settings' compose files (plus packer/images.txt
extras), never from a hand-kept list of the settings' images; bin/build-ami shows it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from ct_fleet import ami
from ct_fleet.ami.images import ami_images, setting_names
from ct_fleet.sandbox.compose import ComposeError, images_in, images_of
from ct_fleet.settings import SettingSources

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "settings"))

from toyarena.catalog import ENVIRONMENTS  # noqa: E402
from toyarena.compose import compose_files  # noqa: E402
from toyarena.images import image_ref  # noqa: E402

REGION = "us-east-1"


def write_setting(root: Path, name: str, compose: dict[str, str]) -> None:
    """A setting package outside the repo whose compose_files() are the given files."""
    pkg = root / name
    pkg.mkdir(parents=True, exist_ok=True)
    for file, text in compose.items():
        (pkg / file).write_text(textwrap.dedent(text))
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            SETTING_NAME = {name!r}
            def compose_files(task_args=None):
                return sorted(Path(__file__).parent.glob("*-compose.yaml"))
            """
        )
    )


def test_toyarenas_images_are_its_compose_files_images():
    files = compose_files()
    assert [image for path in files for image in images_in(path)] == [image_ref(env) for env in ENVIRONMENTS]
    planned = ami_images(["toyarena"], None)
    assert [i.ref for i in planned] == images_of(files)
    # toyarena builds its own (bin/build-images): the builder builds them, nothing is pulled.
    assert {i.how for i in planned} == {"build"} and {i.source for i in planned} == {"toyarena"}
    assert "toyarena" in setting_names()


def test_the_image_list_follows_the_compose_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "settings"
    write_setting(
        root,
        "arena_x",
        {
            "web-compose.yaml": """
                services:
                  default: {image: "registry.example/arena/web:1", network_mode: none}
                  db: {image: "docker.io/library/postgres:16"}
            """
        },
    )
    extras = tmp_path / "images.txt"
    extras.write_text("# extras\ndocker.io/library/postgres:16\nregistry.example/other:2\n")
    assert [(i.ref, i.source, i.how) for i in ami_images(["arena_x"], extras, SettingSources(extra_roots=(root,)))] == [
        ("registry.example/arena/web:1", "arena_x", "pull"),
        ("docker.io/library/postgres:16", "arena_x", "pull"),
        ("registry.example/other:2", "images.txt", "pull"),
    ]
    # A new environment (compose file) and a retagged image change the list, nothing else.
    (root / "arena_x" / "web-compose.yaml").write_text(
        'services:\n  default: {image: "registry.example/arena/web:2"}\n'
    )
    (root / "arena_x" / "ops-compose.yaml").write_text(
        'services:\n  default: {image: "registry.example/arena/ops:1"}\n'
    )
    assert [i.ref for i in ami_images(["arena_x"], None, SettingSources(extra_roots=(root,)))] == [
        "registry.example/arena/ops:1",
        "registry.example/arena/web:2",
    ]


def test_the_build_plan_bakes_the_settings_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_client):
    root = tmp_path / "settings"
    write_setting(root, "arena_y", {"a-compose.yaml": 'services:\n  default: {image: "registry.example/y:1"}\n'})
    plan = ami.plan_build(
        aws_client("ec2"),
        aws_client("ssm"),
        region=REGION,
        param="/ct-fleet-test/ami-images",
        settings=["toyarena", "arena_y"],
        sources=SettingSources(extra_roots=(root,)),
        work_dir=tmp_path / "work",
    )
    toyarena = [image_ref(env) for env in ENVIRONMENTS]
    assert plan.images == [*toyarena, "registry.example/y:1"]
    # Packer pulls what no setting builds, and builds the rest on the builder.
    pulled = ami.read_images(Path(plan.variables["images_file"]))
    assert pulled == ["registry.example/y:1"]
    assert plan.variables["build_settings"] == "toyarena"
    assert plan.variables["local_images"].split() == toyarena


def test_bad_compose_files_stop_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "settings"
    write_setting(root, "arena_z", {"a-compose.yaml": 'services:\n  default: {image: "repo/z:${TAG}"}\n'})
    with pytest.raises(ami.BadInput, match="arena_z: .*interpolated; name it plainly"):
        ami_images(["arena_z"], None, SettingSources(extra_roots=(root,)))
    with pytest.raises(ami.BadInput, match="setting 'nope' found in no source"):
        ami_images(["nope"], None)
    (tmp_path / "b-compose.yaml").write_text("services:\n  default: {build: .}\n")
    with pytest.raises(ComposeError, match="names no image"):
        images_in(tmp_path / "b-compose.yaml")
