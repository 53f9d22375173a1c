"""toyarena's Docker images: names, content-hash tags and build contexts.

The single source of truth for which images exist and what they are tagged: bin/build-images
builds from `plan`, and the task names the same tags (`image_ref(env)`), so a tag always
means one set of inputs and a build is skipped when the tag is already there.

- `base`: Debian bookworm minbase + docker/base/packages.txt, made by docker/base/rootfs.sh
  (debootstrap) and imported with `docker import`. Its tag hashes docker/base/.
- one image per environment: docker/<env>/Dockerfile, `FROM` the base, with envs/<env>/
  under env/ in the build context. Its tag hashes the base's tag, the Dockerfile and the
  files of the context.

A tag is the first 16 hex digits of a SHA-256 over a canonical listing (kind, base tag,
then each file's context path, executable bit and SHA-256 of its bytes, sorted): it does
not depend on mtimes, owners, the checkout's path or the Python version.

Standard library only (bin/build-images runs it with the system python3):
    python3 -m toyarena.images list           # the images the environments run in, one a line
    python3 -m toyarena.images list --all     # the same, base first
    python3 -m toyarena.images plan           # TSV: name, ref, kind (rootfs|dockerfile), base ref or -
    python3 -m toyarena.images ref NAME       # one image's ref
    python3 -m toyarena.images context NAME   # its build context as a tar, on stdout
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import stat
import sys
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

from .catalog import ENVIRONMENTS, ENVS_DIR

DOCKER_DIR = Path(__file__).resolve().parent / "docker"
REPOSITORY_PREFIX = "ct-fleet/toyarena-"
TAG_LENGTH = 16
# Bump to retag every image when the meaning of the inputs changes (e.g. rootfs.sh's
# caller starts passing something new).
HASH_VERSION = "ct-fleet-image-v1"


@dataclass(frozen=True)
class Image:
    """One image: where its inputs live and how bin/build-images makes it."""

    name: str
    kind: str  # "rootfs" (debootstrap + docker import) or "dockerfile" (docker build)
    sources: tuple[tuple[str, Path], ...]  # (path in the build context, host directory)
    base: Image | None = field(default=None)

    @property
    def repository(self) -> str:
        return f"{REPOSITORY_PREFIX}{self.name}"

    @cached_property
    def files(self) -> list[tuple[str, Path]]:
        """Every input file: (context path, host path), sorted by context path."""
        out: dict[str, Path] = {}
        for prefix, root in self.sources:
            if not root.is_dir():
                raise FileNotFoundError(f"image {self.name}: no directory {root}")
            for path in root.rglob("*"):
                if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                    continue
                name = f"{prefix}{path.relative_to(root).as_posix()}"
                if name in out:
                    raise ValueError(f"image {self.name}: two inputs for {name}")
                out[name] = path
        return sorted(out.items())

    @cached_property
    def tag(self) -> str:
        digest = hashlib.sha256()
        base = self.base.ref if self.base else "-"
        digest.update(f"{HASH_VERSION}\n{self.kind}\n{base}\n".encode())
        for name, path in self.files:
            content = hashlib.sha256(path.read_bytes()).hexdigest()
            digest.update(f"{name}\0{int(_executable(path))}\0{content}\n".encode())
        return digest.hexdigest()[:TAG_LENGTH]

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.tag}"

    def write_context(self, out: BinaryIO) -> None:
        """The build context (exactly the hashed files) as an uncompressed tar."""
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, path in self.files:
                data = path.read_bytes()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o755 if _executable(path) else 0o644
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXUSR)


BASE = Image(name="base", kind="rootfs", sources=(("", DOCKER_DIR / "base"),))


def env_image(env: str) -> Image:
    if env not in ENVIRONMENTS:
        raise KeyError(f"no toyarena environment {env!r}")
    return Image(
        name=env,
        kind="dockerfile",
        sources=(("", DOCKER_DIR / env), ("env/", ENVS_DIR / env)),
        base=BASE,
    )


def image_ref(env: str) -> str:
    """The tag the sandbox of environment `env` runs (what bin/build-images builds)."""
    return env_image(env).ref


def env_images() -> list[Image]:
    return [env_image(env) for env in ENVIRONMENTS]


def all_images() -> list[Image]:
    """Every image, in build order (the base first)."""
    return [BASE, *env_images()]


def by_name(name: str) -> Image:
    for image in all_images():
        if image.name == name:
            return image
    names = ", ".join(image.name for image in all_images())
    raise SystemExit(f"toyarena.images: no image {name!r} (have: {names})")


def _lines(rows: Iterable[str]) -> None:
    for row in rows:
        print(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m toyarena.images", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    list_cmd = sub.add_parser("list", help="image refs, one a line (environment images unless --all)")
    list_cmd.add_argument("--all", action="store_true", help="include the base image, first")
    sub.add_parser("plan", help="TSV: name, ref, kind, base ref (- for none), in build order")
    sub.add_parser("ref", help="one image's ref").add_argument("name")
    sub.add_parser("context", help="one image's build context, as a tar on stdout").add_argument("name")
    args = parser.parse_args(argv)

    if args.command == "list":
        _lines(image.ref for image in (all_images() if args.all else env_images()))
    elif args.command == "plan":
        _lines(
            "\t".join([image.name, image.ref, image.kind, image.base.ref if image.base else "-"])
            for image in all_images()
        )
    elif args.command == "ref":
        print(by_name(args.name).ref)
    elif args.command == "context":
        if os.isatty(sys.stdout.fileno()):
            raise SystemExit("toyarena.images: context writes a tar: pipe it (e.g. into docker build -)")
        by_name(args.name).write_context(sys.stdout.buffer)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
