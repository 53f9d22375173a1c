"""Code SHAs and archives from a scratch git repo; credential rules; extra-src packing."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from ct_fleet.cloud import credentials as aws_credentials
from ct_fleet.controller.planning import code, credentials
from ct_fleet.errors import BadInput

REPO = Path(__file__).resolve().parents[2]


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


def test_a_sha_is_archived_once_per_machine_and_a_cached_copy_that_does_not_unpack_is_replaced(
    repo: Path, tmp_path: Path
):
    """The artifact cache local instances read (paths.code_artifacts_dir): the next fleet of
    the same SHA links the cached archive instead of running git archive again."""
    from ct_fleet.controller.planning.shipped import ShippedCode

    cache = tmp_path / "cache"
    sha = code.code_version(repo).sha
    first = ShippedCode.build(repo, sha, [], cache=cache)
    entry = cache / f"{sha}.tar.gz"
    assert entry.stat().st_ino == first.code_tarball.stat().st_ino  # kept for the next one
    os.utime(entry, (0, 0))
    second = ShippedCode.build(repo, sha, [], cache=cache)
    assert second.code_tarball.stat().st_ino == entry.stat().st_ino  # linked, not archived again
    assert entry.stat().st_mtime > 0  # used: the last one the workers' sweep drops
    assert (second.image / "a.py").read_text() == "a = 1\n"
    entry.write_bytes(b"\x1f\x8b not a whole gzip stream")
    third = ShippedCode.build(repo, sha, [], cache=cache)
    assert (third.image / "a.py").read_text() == "a = 1\n"
    with tarfile.open(entry) as tar:  # the cache holds a whole archive again
        assert tar.extractfile("a.py").read() == b"a = 1\n"


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


def test_extra_src_never_ships_credentials_and_says_so(tmp_path: Path):
    from ct_fleet.controller.planning import extra_src

    src = tmp_path / "experiments"
    secret = b"canary-credential"
    for rel in (
        ".env",
        ".env.local",
        "prod.env",
        ".aws/credentials",
        ".ssh/config",
        "keys/id_rsa",
        "keys/id_ed25519.pub",
        "certs/server.pem",
        "certs/tls.key",
        ".netrc",
        "mypkg/policies.py",
    ):
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(secret if not rel.endswith(".py") else b"def p(): ...\n")
    tree = extra_src.scan_tree(src)
    assert [str(f) for f in tree.files] == ["mypkg/policies.py"]
    assert sorted(tree.credentials) == sorted(
        [".aws/", ".ssh/", ".env", ".env.local", "prod.env", ".netrc", "keys/id_rsa", "keys/id_ed25519.pub"]
        + ["certs/server.pem", "certs/tls.key"]
    )
    note = tree.note()
    assert note and "credential files are never shipped" in note and ".env" in note
    tarball = tmp_path / "e.tar.gz"
    code.pack_extra_src(src, tarball)
    with tarfile.open(tarball) as tar:
        assert tar.getnames() == ["experiments/mypkg/policies.py"]
    import gzip

    assert secret not in gzip.decompress(tarball.read_bytes())


@pytest.mark.parametrize("name", ["my tree", "$(id)", "a:b", "-rf", "x\ny", ".hidden"])
def test_extra_src_names_must_be_shell_safe(tmp_path: Path, name: str):
    from ct_fleet.controller.planning import extra_src

    (tmp_path / name).mkdir()
    with pytest.raises(BadInput, match="must be letters, digits and"):
        extra_src.scan_tree(tmp_path / name)


def test_profile_and_keys_together_are_refused():
    with pytest.raises(BadInput, match="remove the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY lines from .env"):
        aws_credentials.apply_aws_credentials(
            {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}, {"AWS_PROFILE": "p"}
        )
    with pytest.raises(BadInput, match="from your shell"):
        aws_credentials.apply_aws_credentials({"AWS_PROFILE": "p"}, {"AWS_ACCESS_KEY_ID": "AKIA"})


def test_profile_from_dotenv_only_selects_and_keys_load_from_dotenv():
    env: dict[str, str] = {}
    assert aws_credentials.apply_aws_credentials({"AWS_PROFILE": "fleet", "OTHER": "x"}, env) == "profile fleet"
    assert env == {"AWS_PROFILE": "fleet"}
    env = {"AWS_PROFILE": "shell"}
    aws_credentials.apply_aws_credentials({"AWS_PROFILE": "dotenv"}, env)
    assert env["AWS_PROFILE"] == "shell"  # the shell wins
    env = {}
    assert (
        aws_credentials.apply_aws_credentials({"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}, env)
        == "static keys from .env"
    )
    assert env == {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}


def test_dotenv_parsing_and_secret_selection(tmp_path: Path):
    path = tmp_path / ".env"
    path.write_text("# comment\nexport ANTHROPIC_API_KEY='sk-1'\nGH_TOKEN=\"gh\"\nUNRELATED=1\nBARE\n")
    dotenv = credentials.read_dotenv(path)
    assert credentials.worker_secrets(dotenv, {"OPENAI_API_KEY": "sk-2"}) == {
        "ANTHROPIC_API_KEY": "sk-1",
        "OPENAI_API_KEY": "sk-2",
        "GH_TOKEN": "gh",
    }


@pytest.mark.parametrize(
    "data,expected",
    [
        (b"\xef\xbb\xbfANTHROPIC_API_KEY=sk-bom\n", {"ANTHROPIC_API_KEY": "sk-bom"}),  # a BOM keeps the first key
        (b"GH_TOKEN=gh-1 # rotated in May\n", {"GH_TOKEN": "gh-1"}),  # a trailing comment is not the secret
        (b"GH_TOKEN=gh#1\n", {"GH_TOKEN": "gh#1"}),  # a # inside a value is the value
        (b"GH_TOKEN='gh # 1'\n", {"GH_TOKEN": "gh # 1"}),
        (b"GH_TOKEN=gh-crlf\r\nOPENAI_API_KEY=sk-crlf\r\n", {"GH_TOKEN": "gh-crlf", "OPENAI_API_KEY": "sk-crlf"}),
        (b"export GH_TOKEN=gh-export\n", {"GH_TOKEN": "gh-export"}),
        (b'GH_TOKEN="a\\tb"\n', {"GH_TOKEN": "a\tb"}),
        (b"GH_TOKEN=pa$word${HOME}\n", {"GH_TOKEN": "pa$word${HOME}"}),  # literal, never expanded
        (b"  GH_TOKEN = spaced  \n", {"GH_TOKEN": "spaced"}),
    ],
)
def test_dotenv_forms(tmp_path: Path, data: bytes, expected: dict[str, str]):
    path = tmp_path / ".env"
    path.write_bytes(data)
    assert credentials.read_dotenv(path) == expected


@pytest.mark.parametrize(
    "data,message",
    [
        (b"GH_TOKEN=ok\nthis is not a line\n", r"\.env:2: not a KEY=value line"),
        (b"GH_TOKEN=\xff\xfe\n", r"not UTF-8 text"),
        (b"1GH=x\n", r"'1GH' is not a variable name"),
        (b"A=" + b"x" * (2 << 20), r"over the 1,048,576-byte limit"),
    ],
)
def test_bad_dotenv_is_refused_with_its_line(tmp_path: Path, data: bytes, message: str):
    path = tmp_path / ".env"
    path.write_bytes(data)
    with pytest.raises(BadInput, match=message):
        credentials.read_dotenv(path)


def test_launched_by_is_the_last_arn_segment(aws_client):
    assert credentials.launched_by(aws_client("sts")) == credentials.name_from_arn(
        aws_client("sts").get_caller_identity()["Arn"]
    )
    assert credentials.name_from_arn("arn:aws:iam::1:user/alice") == "alice"
    assert credentials.name_from_arn("arn:aws:sts::1:assumed-role/AWSReservedSSO_LinuxbenchFleet_ab12/bob") == "bob"


@pytest.mark.parametrize(
    "url,shown",
    [
        ("https://github.com/me/evals.git", "https://github.com/me/evals.git"),
        ("https://me:tok@github.com/me/evals.git", "https://github.com/me/evals.git"),
        ("git@github.com:me/evals.git", "git@github.com:me/evals.git"),
        ("/home/me/src/evals", ""),  # a clone of a local directory: this machine's path
        ("../evals", ""),
        ("file:///home/me/evals", ""),
    ],
)
def test_a_log_shows_an_origin_without_credentials_or_local_paths(url: str, shown: str):
    assert code.public_origin(url) == shown


def test_a_task_tree_has_its_own_revision_or_none(repo: Path, tmp_path_factory: pytest.TempPathFactory):
    plain = tmp_path_factory.mktemp("plain")  # outside the repo
    assert code.tree_revision(plain) is None  # not in a git repo: no revision, as inspect eval
    assert code.tree_revision(repo) is None  # a repo without an origin: none either
    subprocess.run(["git", "remote", "add", "origin", "https://github.com/me/evals.git"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    rev = code.tree_revision(repo)
    assert rev == {"type": "git", "origin": "https://github.com/me/evals.git", "commit": head, "dirty": False}


def test_credential_files_are_found_by_name_any_case_and_by_content(tmp_path: Path):
    """The shipping list of issue 40: each of these shipped before; each is left out and said."""
    from ct_fleet.controller.planning import extra_src

    src = tmp_path / "experiments"
    key = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    home_key = tmp_path / "home" / ".ssh" / "id_rsa"
    home_key.parent.mkdir(parents=True)
    home_key.write_bytes(key)
    files = {
        ".envrc": b"export OPENAI_API_KEY=sk-canary\n",
        ".kube/config": b"apiVersion: v1\n",
        ".config/gh/hosts.yml": b"github.com:\n  oauth_token: gho_canary\n",
        ".config/gcloud/application_default_credentials.json": b'{"type": "authorized_user"}',
        ".pgpass": b"db:5432:*:me:canary\n",
        ".bash_history": b"export GH_TOKEN=ghp_canary\n",
        "aws_credentials": b"[default]\naws_secret_access_key = canary\n",
        "sa-key.json": b'{"type": "service_account", "private_key": "canary"}',
        "ID_RSA": key,
        "notes/settings.txt": b"HF_TOKEN=hf_canary\n",  # .env-style, any name
        "data/blob.bin": b'{"type": "service_account", "private_key": "x"}',  # cloud JSON, any name
        "mypkg/policies.py": b"import os\nAPI_KEY=os.environ['API_KEY']\n",  # source reads a key: ships
    }
    for rel, data in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    os.link(home_key, src / "deploy_material")  # a hard link to ~/.ssh/id_rsa, under a harmless name
    tree = extra_src.scan_tree(src)
    assert [str(f) for f in tree.files] == ["mypkg/policies.py"]
    assert sorted(tree.credentials) == sorted(
        [".envrc", ".kube/", ".config/gh/", ".config/gcloud/", ".pgpass", ".bash_history", "ID_RSA"]
        + ["aws_credentials", "sa-key.json", "deploy_material", "notes/settings.txt", "data/blob.bin"]
    )
    assert "credential files are never shipped" in (tree.note() or "")


def test_a_runs_directory_in_a_tree_is_left_out_and_keeps_the_digest(tmp_path: Path):
    from ct_fleet.controller.planning import extra_src

    src = tmp_path / "task"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "t.py").write_text("x = 1\n")
    digest = code.pack_extra_src(src, tmp_path / "before.tar.gz")
    run = src / "runs" / "abcdef012345"
    (run / "jobs").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "controller.lock").touch()
    (run / "jobs" / "j.evaljob").write_bytes(b"PK")
    assert code.pack_extra_src(src, tmp_path / "after.tar.gz") == digest
    note = extra_src.scan_tree(src).note()
    assert note and "runs directories left out: runs/" in note


def test_a_symlink_loop_in_a_tree_is_bad_input(tmp_path: Path):
    from ct_fleet.controller.planning import extra_src

    src = tmp_path / "task"
    src.mkdir()
    (src / "a").symlink_to("b")
    (src / "b").symlink_to("a")
    with pytest.raises(BadInput, match="symlink loop"):
        extra_src.scan_tree(src)


def test_every_shipped_tree_says_what_it_left_out(tmp_path: Path):
    """A task's own directory ships as a tree like --extra-src: its note is said too."""
    from ct_fleet.controller.planning.shipped import ShippedCode

    task_dir = tmp_path / "mytask"
    task_dir.mkdir()
    (task_dir / "t.py").write_text("x = 1\n")
    (task_dir / ".env").write_text("GH_TOKEN=x\n")
    version = code.code_version(REPO)
    shipped = ShippedCode.build(REPO, version.sha, [task_dir])
    assert any(str(task_dir) in note and ".env" in note for note in shipped.notes), shipped.notes


def test_a_cached_archive_that_would_write_outside_its_destination_is_refused_and_replaced(repo: Path, tmp_path: Path):
    """The cache is a directory anyone with the account may write: its copy is unpacked
    with tarfile's data filter, like everything that ships, and one that would write
    through a link out of the destination is replaced with a fresh archive."""
    import io

    from ct_fleet.controller.planning.shipped import ShippedCode

    cache = tmp_path / "cache"
    cache.mkdir()
    sha = code.code_version(repo).sha
    outside = tmp_path / "outside"
    outside.mkdir()
    with tarfile.open(cache / f"{sha}.tar.gz", "w:gz") as tar:
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        planted = tarfile.TarInfo("link/planted.txt")
        planted.size = 3
        tar.addfile(planted, io.BytesIO(b"bad"))
    shipped = ShippedCode.build(repo, sha, [], cache=cache)
    assert list(outside.iterdir()) == []
    assert (shipped.image / "a.py").read_text() == "a = 1\n" and not (shipped.image / "link").exists()
    with tarfile.open(cache / f"{sha}.tar.gz") as tar:
        assert tar.getnames() == ["a.py"]
