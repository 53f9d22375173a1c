"""Hostile and careless input, table-driven: every case is `ct-fleet eval` with one bad
input, run against a moto server standing in for AWS (--ec2) or on the embedded cloud.

Each case must exit 2 with at most 3 lines on stderr, no traceback, a message naming the
problem, nothing created in moto (no bucket, object, queue, instance or parameter) and no
process left behind. The cases run a few at a time, each a CLI process of its own forked
from tests/testkit/cli_forker.py; tests/fleet/test_e2e.py's bad inputs go through bin/ct-fleet itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest

from testkit.cli_forker import FORKER
from testkit.fleet import ec2_defaults

REPO = Path(__file__).resolve().parents[2]
SIDE_BY_SIDE = 3  # cases run side by side (most of a case is moto round trips and file checks)
# The first test's setup runs every case (a few at a time): give it room on a busy machine.
pytestmark = pytest.mark.timeout(1800)

Setup = Callable[[Path], list[str]]

# Nowhere for boto3 to find credentials: no keys, no files, no instance metadata.
NO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "",
    "AWS_SECRET_ACCESS_KEY": "",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class Case:
    name: str
    args: list[str]
    message: str
    files: dict[str, bytes] = field(default_factory=dict)  # written under the case's directory
    env: dict[str, str] = field(default_factory=dict)
    ec2: bool = True
    setup: Setup | None = None  # builds trees under the case directory, returns extra args


def _tree(name: str, files: dict[str, bytes]) -> Setup:
    def build(base: Path) -> list[str]:
        root = base / name
        root.mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return ["--extra-src", str(root)]

    return build


def _symlink_loop_beside_the_task(base: Path) -> list[str]:
    """A task whose directory (shipped as its tree) holds a symlink loop."""
    root = base / "looped"
    root.mkdir()
    (root / "t.py").write_bytes(
        b"from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n\n"
        b"@task\ndef t():\n    return Task(dataset=[Sample(input='x')])\n"
    )
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    return ["--task-file", "", str(root / "t.py")]


def _many_files(base: Path) -> list[str]:
    root = base / "big"
    root.mkdir()
    for i in range(20_001):
        (root / f"f{i}.txt").touch()
    return ["--extra-src", str(root)]


def _huge_file(base: Path) -> list[str]:
    root = base / "heavy"
    root.mkdir()
    with open(root / "data.bin", "wb") as fh:
        fh.truncate((256 << 20) + 1)  # sparse: no disk used
    return ["--extra-src", str(root)]


def _symlink_escape(base: Path) -> list[str]:
    root = base / "tree"
    root.mkdir()
    (base / "outside.sh").write_text("echo hi\n")
    (root / "setup.sh").symlink_to(base / "outside.sh")
    return ["--extra-src", str(root), "--ec2-arg", "worker_setup=tree/setup.sh"]


def _alias_bomb() -> bytes:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    return ("\n".join(lines) + "\n").encode()


def ec2(key: str, value: str) -> list[str]:
    return ["--ec2-arg", f"{key}={value}"]


CASES = [
    # -- --ec2-arg: keys, types, ranges, AWS names, rules between knobs
    Case("unknown knob", ec2("max_worker", "3"), "did you mean max_workers"),
    Case("no equals", ["--ec2-arg", "max_workers"], "write key=value"),
    Case("int not a number", ec2("max_workers", "lots"), "expected a whole number"),
    Case("int fraction", ec2("max_workers", "2.5"), "expected a whole number"),
    Case("max_workers zero", ec2("max_workers", "0"), "must be at least 1"),
    Case("concurrency zero", ec2("concurrency_per_worker", "0"), "must be at least 1"),
    Case("volume zero", ec2("volume_gb", "0"), "volume_gb=0: must be at least 8"),
    Case("volume over EBS", ec2("volume_gb", "70000"), "must be at most 16384"),
    Case("bool junk", ec2("spot", "maybe"), "expected true or false"),
    Case("price infinite", ec2("hourly_price", "inf"), "must be a finite number"),
    Case("price nan", ec2("hourly_price", "nan"), "must be a finite number"),
    Case("cost negative", ec2("max_cost", "-5"), "must be more than 0"),
    Case("cost infinite", ec2("max_cost", "1e999"), "must be a finite number"),
    Case("visibility zero", ec2("visibility_timeout", "0"), "must be at least 1"),
    Case("visibility over SQS", ec2("visibility_timeout", "99999"), "must be at most 43200"),
    Case("visibility vs heartbeat", ec2("visibility_timeout", "10"), "at least 2 x heartbeat_interval"),
    Case(
        "visibility vs heartbeat, both set",
        [*ec2("visibility_timeout", "30"), *ec2("heartbeat_interval", "20")],
        "at least 2 x heartbeat_interval (40s)",
    ),
    Case("receive count zero", ec2("max_receive_count", "0"), "must be at least 1"),
    Case("heartbeat zero", ec2("heartbeat_interval", "0"), "must be at least 1"),
    Case("time limit negative", ec2("sample_time_limit", "-1"), "must be at least 0"),
    Case("region upper case", ec2("region", "US-EAST-1"), "not an AWS region name"),
    Case("region injection", ec2("region", "us-east-1;id"), "not an AWS region name"),
    Case("region from the environment", [], "not an AWS region name", env={"AWS_REGION": "us east 1"}),
    Case("bucket upper case", ec2("bucket", "My_Bucket"), "not an S3 bucket name"),
    Case("bucket too short", ec2("bucket", "ab"), "not an S3 bucket name"),
    Case("bucket like an IP", ec2("bucket", "192.168.0.1"), "IP address"),
    Case("bucket reserved prefix", ec2("bucket", "xn--results"), "reserved by AWS"),
    Case("instance type", ec2("instance_type", "huge"), "not an EC2 instance type"),
    Case("instance type empty", ec2("instance_type", ""), "instance_type needs a value"),
    Case("ami id", ec2("ami", "ami-xyz"), "not an AMI id"),
    Case("ami neither id nor path", ec2("ami", "ubuntu"), "write an AMI id"),
    Case("ami param not a path", ec2("ami_param", "worker-ami"), "not an SSM parameter path"),
    Case("instance profile", ec2("instance_profile", "a b"), "not an IAM instance profile name"),
    Case("security group id", ec2("security_group", "sg-0abc"), "not starting with sg-"),
    Case("worker user", ec2("worker_user", "root;id"), "not a Linux user name"),
    Case("worker_setup traversal", ec2("worker_setup", "tree/../../etc/passwd"), "inside its extra-src tree"),
    Case("worker_setup substitution", ec2("worker_setup", "tree/$(id).sh"), "<extra-src basename>/<path>"),
    Case("worker_setup without tree", ec2("worker_setup", "tree/setup.sh"), "shipped by --extra-src"),
    Case("worker_setup symlink escape", [], "outside the tree", setup=_symlink_escape),
    Case(
        "worker_setup is a credential",
        ec2("worker_setup", "tree/deploy.pem"),
        "left out of the shipped tree",
        setup=_tree("tree", {"deploy.pem": b"key"}),
    ),
    Case("resume not an id", ec2("resume", "latest"), "not a fleet id"),
    Case("resume unknown fleet", ec2("resume", "0123456789ab"), "no fleet 0123456789ab"),
    Case("resume with new_fleet", [*ec2("resume", "0123456789ab"), *ec2("new_fleet", "true")], "contradict"),
    # -- run configs
    Case(
        "config alias bomb",
        ["--config", "{dir}/run.yml"],
        "YAML anchors (&name) are not allowed",
        files={"run.yml": _alias_bomb()},
    ),
    Case("config anchor", ["--config", "{dir}/run.yml"], "YAML anchors", files={"run.yml": b"epochs: &e 2\n"}),
    Case(
        "config merge key",
        ["--config", "{dir}/run.yml"],
        "merge keys",
        files={"run.yml": b"ec2_args:\n  <<: {max_workers: 2}\n"},
    ),
    Case(
        "config duplicate key",
        ["--config", "{dir}/run.yml"],
        "duplicate key",
        files={"run.yml": b"epochs: 1\nepochs: 2\n"},
    ),
    Case("config unknown key", ["--config", "{dir}/run.yml"], "unknown key 'epoch'", files={"run.yml": b"epoch: 2\n"}),
    Case("config epochs text", ["--config", "{dir}/run.yml"], "epochs", files={"run.yml": b'epochs: "3"\n'}),
    Case(
        "config epochs zero",
        ["--config", "{dir}/run.yml"],
        "greater than or equal to 1",
        files={"run.yml": b"epochs: 0\n"},
    ),
    Case("config not a mapping", ["--config", "{dir}/run.yml"], "expected a mapping", files={"run.yml": b"- 1\n- 2\n"}),
    Case(
        "config python tag",
        ["--config", "{dir}/run.yml"],
        "not valid YAML",
        files={"run.yml": b"x: !!python/object:os.system {}\n"},
    ),
    Case("config not UTF-8", ["--config", "{dir}/run.yml"], "not UTF-8", files={"run.yml": b"policy: \xff\xfe\n"}),
    Case(
        "config too large",
        ["--config", "{dir}/run.yml"],
        "over the 1,048,576-byte limit",
        files={"run.yml": b"#" * (1 << 21)},
    ),
    Case(
        "config ec2_args type",
        ["--config", "{dir}/run.yml"],
        "max_workers=True: expected a number",
        files={"run.yml": b"ec2_args: {max_workers: true}\n"},
    ),
    Case(
        "config attack unknown key",
        ["--config", "{dir}/run.yml"],
        "unknown key 'attacks[0].polcy'",
        files={"run.yml": b"attacks:\n  - {name: a, polcy: attack}\n"},
    ),
    Case(
        "config attack names twice",
        ["--config", "{dir}/run.yml"],
        "used twice",
        files={"run.yml": b"attacks:\n  - {name: a}\n  - {name: a}\n"},
    ),
    Case("config deep nesting", ["--config", "{dir}/run.yml"], "YAML", files={"run.yml": b"[" * 5000 + b"]" * 5000}),
    Case("attack without config", ["--attack", "a"], "--attack needs --config"),
    # -- task files
    Case("task file missing", ["--task-file", "nope"], "unknown task set 'nope'"),
    Case("task file is a directory", ["--task-file", "{dir}"], "not a file"),
    Case(
        "task yaml alias",
        ["--task-file", "{dir}/t.yml"],
        "YAML anchors",
        files={"t.yml": b"- &t {env: web, main_task: fix_login}\n- *t\n"},
    ),
    Case(
        "task yaml not a list", ["--task-file", "{dir}/t.yml"], "expected a YAML list", files={"t.yml": b"env: web\n"}
    ),
    Case("task yaml empty", ["--task-file", "{dir}/t.yml"], "no tasks", files={"t.yml": b"[]\n"}),
    Case(
        "task name not text",
        ["--task-file", "{dir}/t.yml"],
        "main_task",
        files={"t.yml": b"- {env: web, main_task: 7}\n"},
    ),
    Case(
        "task name with newline",
        ["--task-file", "{dir}/t.yml"],
        "one line of printable text",
        files={"t.yml": b'- {env: web, main_task: "a\\nb"}\n'},
    ),
    Case(
        "task unknown env",
        ["--task-file", "{dir}/t.yml"],
        "unknown env 'mars'",
        files={"t.yml": b"- {env: mars, main_task: x}\n"},
    ),
    Case("task yaml not UTF-8", ["--task-file", "{dir}/t.yml"], "not UTF-8", files={"t.yml": b"- {env: w\xe9b}\n"}),
    Case(
        "task jsonl bad json",
        ["--task-file", "{dir}/t.jsonl"],
        "t.jsonl:2: not valid JSON",
        files={"t.jsonl": b'{"env": "web", "main_task": "fix_login"}\n{"env":\n'},
    ),
    Case(
        "task jsonl missing key",
        ["--task-file", "{dir}/t.jsonl"],
        "main_task is required",
        files={"t.jsonl": b'{"env": "web"}\n'},
    ),
    Case(
        "task jsonl extra key",
        ["--task-file", "{dir}/t.jsonl"],
        "unknown key 'side'",
        files={"t.jsonl": b'{"env": "web", "main_task": "x", "side": "y"}\n'},
    ),
    Case(
        "task jsonl a list",
        ["--task-file", "{dir}/t.jsonl"],
        "expected a mapping",
        files={"t.jsonl": b'["web", "fix_login"]\n'},
    ),
    Case("task jsonl too large", ["--task-file", "{dir}/t.jsonl"], "byte limit", files={"t.jsonl": b"\n" * (17 << 20)}),
    Case("task file and -e", ["-e", "web"], "either --task-file or -e"),
    # -- settings, tasks, policies, models, commands
    Case("setting is any module", ["--task-file", "", "-e", "this:web"], "setting 'this' found in no source"),
    Case("setting dotted module", ["--task-file", "", "-e", "os.path:web"], "a setting is named like a Python module"),
    Case("setting unknown", ["--task-file", "", "-e", "nosuchsetting:web"], "found in no source"),
    Case("env unknown", ["--task-file", "", "-e", "mars"], "unknown env 'mars'"),
    Case("main task unknown", ["--task-file", "", "-e", "web", "-t", "nope"], "unknown main task 'nope'"),
    Case("policy unknown", ["--policy", "sneaky"], "unknown policy 'sneaky'"),
    Case("policy not a python name", ["--policy", "os.system('id'):x"], "is neither tracked in this repo"),
    Case("policy not shipped", ["--policy", "mypkg.x:pol"], "--extra-src"),
    Case("sandbox module not shipped", ["--sandbox", "nosuchmod_x:kind"], "is neither tracked in this repo"),
    Case(
        "sandbox config not beside the task",
        ["--task-file", "", "{dir}/t.py", "--sandbox", "docker:none.yml"],
        "no none.yml beside",
        files={
            "t.py": b"from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n\n"
            b"@task\ndef t():\n    return Task(dataset=[Sample(input='x')])\n"
        },
    ),
    Case("refused inspect option", ["--trace"], "--trace: traces one process"),
    Case("inspect option of the wrong type", ["--temperature", "warm"], "not a valid float"),
    Case("inspect option inspect refuses", ["--epochs-reducer", "nonesuch"], "nonesuch was not found"),
    Case("model without provider", ["--model", "gpt"], "write provider/model"),
    Case("model with a space", ["--model", "openai/gpt 4"], "write provider/model"),
    Case("command blank", ["--command", "   "], "--command"),
    Case("command unterminated quote", ["--command", 'echo "unterminated'], "--command is not valid bash"),
    Case("epochs zero", ["--epochs", "0"], "at least 1"),
    Case("epochs negative", ["--epochs", "-3"], "at least 1"),
    Case("epochs not a number", ["--epochs", "many"], "not a valid integer"),
    Case("epochs absurd", ["--epochs", "1000000"], "over the limit of 200,000"),
    Case("large run unconfirmed", ["--epochs", "600"], "large run", ec2=False),
    # --checkpoint on the local fleet: Inspect would download restic, or run one too old to checkpoint.
    Case(
        "checkpoint no restic",
        ["--checkpoint", "turn:2"],
        "none is on PATH",
        files={"bin/git": b'#!/bin/sh\nexec /usr/bin/git "$@"\n'},
        env={"PATH": "{dir}/bin"},
        ec2=False,
    ),
    Case(
        "checkpoint restic too old",
        ["--checkpoint", "turn:2"],
        "needs restic >= 0.15",
        files={"bin/restic": b"#!/bin/sh\necho 'restic 0.14.0 compiled with go1.19'\n"},
        env={"PATH": "{dir}/bin"},
        ec2=False,
    ),
    Case("unknown option", ["--epoch", "2"], "No such option"),
    # -- .env and credentials
    Case("dotenv junk line", [], ".env:2: not a KEY=value line", files={".env": b"GH_TOKEN=x\nthis is junk\n"}),
    Case("dotenv not UTF-8", [], "not UTF-8", files={".env": b"GH_TOKEN=\xff\n"}),
    Case("dotenv bad name", [], "is not a variable name", files={".env": b"1TOKEN=x\n"}),
    Case("dotenv too large", [], "byte limit", files={".env": b"#" * (2 << 20)}),
    Case(
        "task arg holds a secret",
        ["--task-file", "", "{dir}/t.py", "-T", "token=ghp_thesecretvalue1"],
        "-T token: its value holds the secret GH_TOKEN's",
        files={
            ".env": b"GH_TOKEN=ghp_thesecretvalue1\n",
            "t.py": b"from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n\n"
            b"@task\ndef t(token: str = ''):\n    return Task(dataset=[Sample(input='x')])\n",
        },
    ),
    Case(
        "model arg holds a secret",
        ["-M", "organization=org sk-thesecretvalue2"],
        "-M organization: its value holds the secret OPENAI_API_KEY's",
        files={".env": b"OPENAI_API_KEY=sk-thesecretvalue2\n"},
    ),
    Case("dotenv is a directory", [], "is a directory", files={".env/x": b""}),
    Case("symlink loop in a task directory", [], "symlink loop", setup=_symlink_loop_beside_the_task),
    Case("profile and keys", [], "AWS_PROFILE=p and AWS_ACCESS_KEY_ID are both set", env={"AWS_PROFILE": "p"}),
    Case("no AWS credentials", [], "no AWS credentials: run `aws sso login --profile NAME`", env=NO_CREDENTIALS),
    Case("profile unknown", [], "AWS profile 'nope' is not configured", env={**NO_CREDENTIALS, "AWS_PROFILE": "nope"}),
    Case(
        "docker param injection",
        [],
        "not an SSM parameter path",
        env={"DOCKER_ORG_NAME_SSM_PARAM": "/linuxbench/docker-org-name\nFLEET_ENV\nid"},
    ),
    Case("secret over 4 KB", [], "secret GH_TOKEN is 5000 bytes", env={"GH_TOKEN": "g" * 5000}),
    Case(
        "secret over 4 KB in .env",
        [],
        "secret OPENAI_API_KEY is 4100 bytes",
        files={".env": b"OPENAI_API_KEY=" + b"k" * 4100},
    ),
    Case("docker param outside prefix", [], "must stay under", env={"DOCKER_ORG_PAT_SSM_PARAM": "/other/pat"}),
    Case("docker registry injection", [], "write a registry host", env={"DOCKER_REGISTRY": "ghcr.io\n$(id)"}),
    Case("docker registry with a path", [], "write a registry host", env={"DOCKER_REGISTRY": "https://ghcr.io/x"}),
    # -- --extra-src trees
    Case("extra-src root", ["--extra-src", "/"], "not the file system root"),
    Case("extra-src missing", ["--extra-src", "{dir}/nothing"], "not a directory"),
    Case("extra-src is a file", ["--extra-src", "{dir}/f.txt"], "not a directory", files={"f.txt": b"x"}),
    Case("extra-src name with a space", [], "must be letters, digits and ._-", setup=_tree("my tree", {"a.py": b""})),
    Case("extra-src name with $()", [], "must be letters, digits and ._-", setup=_tree("$(id)", {"a.py": b""})),
    Case("extra-src name with a colon", [], "must be letters, digits and ._-", setup=_tree("a:b", {"a.py": b""})),
    Case("extra-src too many files", [], "more than 20,000 files", setup=_many_files),
    Case("extra-src too large", [], "more than 256 MiB", setup=_huge_file),
    Case(
        "extra-src link outside",
        [],
        "outside the tree",
        setup=lambda base: (
            (base / "t").mkdir() or (base / "t" / "key").symlink_to("/etc/hostname") or ["--extra-src", str(base / "t")]
        ),
    ),
    Case(
        "extra-src two of a name",
        ["--extra-src", "{dir}/a/exp", "--extra-src", "{dir}/b/exp"],
        "share the basename",
        files={"a/exp/x.py": b"", "b/exp/y.py": b""},
    ),
]


@pytest.fixture(scope="module")
def account(moto_server) -> dict[str, Any]:
    kw = dict(
        endpoint_url=moto_server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"lb-fleet-bad-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", **kw).create_bucket(Bucket=bucket)
    return {"kw": kw, "bucket": bucket}


def moto_state(account: dict[str, Any]) -> dict[str, Any]:
    """Everything a run could create: buckets and their objects, queues, instances, parameters."""
    kw = account["kw"]
    s3 = boto3.client("s3", **kw)
    buckets = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
    objects = {b: s3.list_objects_v2(Bucket=b).get("KeyCount", 0) for b in buckets}
    queues = sorted(boto3.client("sqs", **kw).list_queues().get("QueueUrls", []))
    ec2 = boto3.client("ec2", **kw)
    instances = sorted(i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"])
    groups = sorted(g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"])
    params = sorted(p["Name"] for p in boto3.client("ssm", **kw).describe_parameters().get("Parameters", []))
    return {
        "buckets": buckets,
        "objects": objects,
        "queues": queues,
        "instances": instances,
        "groups": groups,
        "params": params,
    }


def leftover_processes(case_dir: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.environ().get("CT_FLEET_RUNS") == str(case_dir / "runs"):
                found.append(" ".join(proc.info["cmdline"] or []))
        except psutil.Error:
            continue
    return found


def run_case(case: Case, base: Path, account: dict[str, Any]) -> dict[str, Any]:
    case_dir = base / uuid.uuid4().hex[:8]
    case_dir.mkdir()
    for rel, data in case.files.items():
        path = case_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if rel.startswith("bin/"):
            path.chmod(0o755)
    args = [a.replace("{dir}", str(case_dir)) for a in case.args]
    if case.setup:
        args += case.setup(case_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_ENDPOINT_URL")}
    env.update(
        AWS_ENDPOINT_URL=account["kw"]["endpoint_url"],
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="us-east-1",
        CT_FLEET_RUNS=str(case_dir / "runs"),
        CT_FLEET_DOTENV=str(case_dir / ".env"),
        COLUMNS="300",
    )
    env.update({k: v.replace("{dir}", str(case_dir)) for k, v in case.env.items()})
    base_args = ["--task-file", "smoke"]
    if "--task-file" in args:
        base_args = []
        at = args.index("--task-file")
        if not args[at + 1]:
            del args[at : at + 2]  # an empty --task-file means "choose with -e"
    if case.ec2:
        base_args += ["--ec2", *ec2_defaults({"bucket": account["bucket"], "auto_confirm": "true"}, args)]
        args = []
    out, err = case_dir / "stdout.txt", case_dir / "stderr.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        run = FORKER.fork(
            ["eval", *base_args, *args], env=env, cwd=REPO, stdout=stdout.fileno(), stderr=stderr.fileno()
        )
        code = run.wait(timeout=300)
    runs = case_dir / "runs"
    created = sorted(str(p.relative_to(runs)) for p in runs.rglob("*")) if runs.exists() else []
    return {
        "code": code,
        "stdout": out.read_text(),
        "stderr": err.read_text(),
        "created": created,
        "left": leftover_processes(case_dir),
    }


@pytest.fixture(scope="module")
def outcomes(account, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("bad")
    before = moto_state(account)
    with ThreadPoolExecutor(max_workers=SIDE_BY_SIDE) as pool:
        futures = {case.name: pool.submit(run_case, case, base, account) for case in CASES}
        results = {name: fut.result() for name, fut in futures.items()}
    results["__moto__"] = (before, moto_state(account))
    return results


def test_the_table_is_large_and_names_are_unique():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line(case: Case, outcomes):
    got = outcomes[case.name]
    lines = [line for line in got["stderr"].splitlines() if line.strip()]
    shown = f"exit {got['code']}\nstderr:\n{got['stderr']}\nstdout:\n{got['stdout'][-2000:]}"
    assert got["code"] == 2, shown
    assert 1 <= len(lines) <= 3, shown
    assert "Traceback" not in got["stderr"] + got["stdout"], shown
    assert case.message in got["stderr"], shown
    assert got["created"] == [], f"created under runs/: {got['created']}"
    assert got["left"] == [], f"processes left: {got['left']}"


def test_nothing_was_created_in_moto(outcomes):
    before, after = outcomes["__moto__"]
    assert after == before


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["ssh", "i-0123;id", "--dry-run"], {}, "'i-0123;id' is not an EC2 instance id"),
        (["logs", "0123456789ab", "i-0123 x"], {}, "is not an EC2 instance id"),
        (["ssh", "i-0123456789abcdef0", "--dry-run"], NO_CREDENTIALS, "no AWS credentials: run `aws sso login"),
        (["cloud", "status"], NO_CREDENTIALS, "no AWS credentials: run `aws sso login"),
    ],
)
def test_fleet_commands_refuse_bad_ids_and_missing_credentials_in_one_line(
    args: list[str], env: dict[str, str], message: str, moto_server, tmp_path: Path
):
    """Checked before anything is asked of AWS (the moto server would answer anything)."""
    base = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE",)}
    base.update(
        AWS_ENDPOINT_URL=moto_server.endpoint_url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        CT_FLEET_DOTENV=str(tmp_path / ".env"),
        COLUMNS="300",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ct_fleet.cli", *args],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and message in lines[0], proc.stderr
