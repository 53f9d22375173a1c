"""toyarena.images: the content-hash tags bin/build-images builds and the task names."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETTINGS_DIR = REPO / "examples" / "settings"
if str(SETTINGS_DIR) not in sys.path:
    sys.path.insert(0, str(SETTINGS_DIR))

from toyarena import images  # noqa: E402
from toyarena.catalog import ENVIRONMENTS  # noqa: E402

TOYARENA = SETTINGS_DIR / "toyarena"


def copy_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of docker/ and envs/ elsewhere, with fresh mtimes: (docker dir, envs dir)."""
    docker = tmp_path / "docker"
    envs = tmp_path / "envs"
    shutil.copytree(TOYARENA / "docker", docker, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TOYARENA / "envs", envs, ignore=shutil.ignore_patterns("__pycache__"))
    return docker, envs


def images_at(docker: Path, envs: Path) -> tuple[images.Image, dict[str, images.Image]]:
    base = images.Image(name="base", kind="rootfs", sources=(("", docker / "base"),))
    envs_images = {
        env: images.Image(name=env, kind="dockerfile", sources=(("", docker / env), ("env/", envs / env)), base=base)
        for env in ENVIRONMENTS
    }
    return base, envs_images


def test_every_environment_has_an_image_tagged_by_a_hash():
    refs = [images.image_ref(env) for env in ENVIRONMENTS]
    for env, ref in zip(ENVIRONMENTS, refs, strict=True):
        assert re.fullmatch(rf"ct-fleet/toyarena-{env}:[0-9a-f]{{16}}", ref), ref
    assert len(set(refs)) == len(refs)
    assert [image.name for image in images.all_images()] == ["base", *ENVIRONMENTS]


def test_tags_ignore_path_and_mtimes(tmp_path):
    base, envs = images_at(*copy_tree(tmp_path))
    assert base.tag == images.BASE.tag
    assert {env: image.tag for env, image in envs.items()} == {env: images.env_image(env).tag for env in ENVIRONMENTS}


def test_an_environment_file_retags_only_that_environment(tmp_path):
    docker, envs_dir = copy_tree(tmp_path)
    (envs_dir / "web" / "static" / "index.html").write_text("<p>changed</p>\n")
    base, envs = images_at(docker, envs_dir)
    assert base.tag == images.BASE.tag
    assert envs["web"].tag != images.env_image("web").tag
    assert envs["ops"].tag == images.env_image("ops").tag


def test_the_base_recipe_retags_the_base_and_every_environment(tmp_path):
    docker, envs_dir = copy_tree(tmp_path)
    with (docker / "base" / "packages.txt").open("a") as f:
        f.write("procps\n")
    base, envs = images_at(docker, envs_dir)
    assert base.tag != images.BASE.tag
    assert all(image.tag != images.env_image(env).tag for env, image in envs.items())


def test_the_executable_bit_is_an_input(tmp_path):
    docker, envs_dir = copy_tree(tmp_path)
    script = envs_dir / "pipeline" / "pipeline.sh"
    script.chmod(script.stat().st_mode ^ 0o100)
    _, envs = images_at(docker, envs_dir)
    assert envs["pipeline"].tag != images.env_image("pipeline").tag


def test_the_context_holds_exactly_the_hashed_files():
    image = images.env_image("web")
    out = io.BytesIO()
    image.write_context(out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [name for name, _ in image.files]
        assert "Dockerfile" in [m.name for m in members]
        assert "env/app/auth.py" in [m.name for m in members]
        for member, (_, path) in zip(members, image.files, strict=True):
            assert tar.extractfile(member).read() == path.read_bytes()
            assert member.mtime == 0 and member.uid == 0


def test_the_cli_bin_build_images_reads_agrees_with_the_module():
    # The system python3, as bin/build-images runs it: standard library only.
    python = shutil.which("python3") or sys.executable
    env = {"PYTHONPATH": str(SETTINGS_DIR), "PATH": "/usr/bin:/bin"}
    plan = subprocess.run(
        [python, "-m", "toyarena.images", "plan"], env=env, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    rows = [line.split("\t") for line in plan]
    assert rows[0] == ["base", images.BASE.ref, "rootfs", "-"]
    assert rows[1:] == [[env, images.image_ref(env), "dockerfile", images.BASE.ref] for env in ENVIRONMENTS]
    listed = subprocess.run(
        [python, "-m", "toyarena.images", "list"], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    assert listed == [images.image_ref(env) for env in ENVIRONMENTS]
