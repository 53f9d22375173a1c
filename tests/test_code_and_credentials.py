"""Code SHAs and archives from a scratch git repo; credential rules; extra-src packing."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from ct_fleet.controller import code, credentials
from ct_fleet.errors import BadInput


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "a.py").write_text("a = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-qm", "one")
    return tmp_path


def test_clean_tree_ships_head(repo: Path):
    version = code.code_version(repo)
    assert version == code.CodeVersion(git(repo, "rev-parse", "HEAD"), False, 0)


def test_dirty_tree_ships_a_tree_sha_with_tracked_changes_only(repo: Path, tmp_path: Path):
    (repo / "a.py").write_text("a = 2\n")
    (repo / "new.py").write_text("untracked\n")
    version = code.code_version(repo)
    assert version.dirty and version.untracked == 1
    assert version.sha != git(repo, "rev-parse", "HEAD")
    assert git(repo, "diff", "--cached", "--name-only") == ""  # nothing was staged in the user's index
    tarball = code.archive(repo, version.sha, tmp_path / "out" / "code.tar.gz")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        assert tar.extractfile("a.py").read() == b"a = 2\n"
    assert "new.py" not in names
    git(repo, "add", "new.py")
    assert code.code_version(repo).sha != version.sha  # git add makes it ship


def test_extra_src_leaves_out_caches_envs_builds_and_lockfiles(tmp_path: Path):
    src = tmp_path / "experiments"
    for rel in (
        "mypkg/__init__.py",
        "mypkg/policies.py",
        "mypkg/__pycache__/x.pyc",
        ".git/HEAD",
        "node_modules/m/index.js",
        ".venv/bin/python",
        "venv/x",
        "build/lib.py",
        "dist/w.whl",
        "uv.lock",
        "package-lock.json",
        "mypkg/data.json",
    ):
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    digest = code.pack_extra_src(src, tmp_path / "e.tar.gz")
    with tarfile.open(tmp_path / "e.tar.gz") as tar:
        names = sorted(n for n in tar.getnames())
    assert names == ["experiments/mypkg/__init__.py", "experiments/mypkg/data.json", "experiments/mypkg/policies.py"]
    # The digest follows the content only: packing again (new mtimes) gives it again, an edit changes it.
    (src / "mypkg" / "policies.py").touch()
    assert code.pack_extra_src(src, tmp_path / "again.tar.gz") == digest
    (src / "mypkg" / "policies.py").write_text("y")
    assert code.pack_extra_src(src, tmp_path / "edited.tar.gz") != digest


def test_profile_and_keys_together_are_refused():
    with pytest.raises(BadInput, match="remove the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY lines from .env"):
        credentials.apply_aws_credentials(
            {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}, {"AWS_PROFILE": "p"}
        )
    with pytest.raises(BadInput, match="from your shell"):
        credentials.apply_aws_credentials({"AWS_PROFILE": "p"}, {"AWS_ACCESS_KEY_ID": "AKIA"})


def test_profile_from_dotenv_only_selects_and_keys_load_from_dotenv():
    env: dict[str, str] = {}
    assert credentials.apply_aws_credentials({"AWS_PROFILE": "fleet", "OTHER": "x"}, env) == "profile fleet"
    assert env == {"AWS_PROFILE": "fleet"}
    env = {"AWS_PROFILE": "shell"}
    credentials.apply_aws_credentials({"AWS_PROFILE": "dotenv"}, env)
    assert env["AWS_PROFILE"] == "shell"  # the shell wins
    env = {}
    assert (
        credentials.apply_aws_credentials({"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}, env)
        == "static keys from .env"
    )
    assert env == {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}


def test_dotenv_parsing_and_secret_selection(tmp_path: Path):
    path = tmp_path / ".env"
    path.write_text("# comment\nexport ANTHROPIC_API_KEY='sk-1'\nGH_TOKEN=\"gh\"\nUNRELATED=1\nbad line\n")
    dotenv = credentials.read_dotenv(path)
    assert credentials.worker_secrets(dotenv, {"OPENAI_API_KEY": "sk-2"}) == {
        "ANTHROPIC_API_KEY": "sk-1",
        "OPENAI_API_KEY": "sk-2",
        "GH_TOKEN": "gh",
    }


def test_launched_by_is_the_last_arn_segment(aws_client):
    assert credentials.launched_by(aws_client("sts")) == credentials.name_from_arn(
        aws_client("sts").get_caller_identity()["Arn"]
    )
    assert credentials.name_from_arn("arn:aws:iam::1:user/alice") == "alice"
    assert credentials.name_from_arn("arn:aws:sts::1:assumed-role/AWSReservedSSO_LinuxbenchFleet_ab12/bob") == "bob"
