"""Helpers for tests that drive `bin/ct-fleet eval` as a subprocess and watch its processes."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import boto3
import psutil
from inspect_ai.log import read_eval_log

from ct_fleet.cloud.moto_server import credentials
from ct_fleet.protocol.run_layout import paused_marker
from testkit.cli_forker import FORKER, ForkedRun

REPO = Path(__file__).resolve().parents[2]
FAST = ["--ec2-arg", "idle_timeout=3", "--ec2-arg", "retry_backoff=1"]
# For fleets whose tests are not about several workers: each local worker pays its own warm
# runner's start (inspect_ai imported, a warm-up eval), the largest part of a small fleet's CPU.
ONE_WORKER = ["--ec2-arg", "max_workers=1"]
# Done-queue bodies an adversarial pass sent (each crashed the controller once).
BAD_REPORTS = [
    "not json",
    "[]",
    "5",
    '"x"',
    '{"type": "batch", "reports": "abc"}',
    '{"type": "batch", "reports": [1]}',
    '{"type": "batch", "reports": null}',
    '{"type": "done"}',
    '{"type": "done", "fleet_id": "f", "instance_id": "i", "worker_id": "w", "job_id": 7, "outcome": "success"}',
    '{"type": "done", "fleet_id": "f", "instance_id": "i", "worker_id": "w", "receive_count": "many"}',
]
# Tests that are not about Docker run toyarena in Inspect's local sandbox (the default is Docker).
LOCAL = ["-T", "sandbox=local"]


def env_for(runs: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "AWS_PROFILE")}
    env.update(CT_FLEET_RUNS=str(runs), CT_FLEET_DOTENV=str(runs / ".env"), CT_FAULT_DIR=str(runs / "faults"), **extra)
    return env


def last_wins(args: Sequence[str]) -> list[str]:
    """`args` with each --ec2-arg key once, holding its last value: ct-fleet refuses a knob
    given twice, and tests add their own values to shared ones like FAST."""
    values: dict[str, str] = {}
    for flag, pair in zip(args, args[1:], strict=False):
        if flag == "--ec2-arg":
            values[pair.partition("=")[0]] = pair
    out: list[str] = []
    skip = False
    for flag, pair in zip(args, [*args[1:], ""], strict=True):
        if skip:
            skip = False
        elif flag == "--ec2-arg":
            key = pair.partition("=")[0]
            if key in values:
                out += [flag, values.pop(key)]
            skip = True
        else:
            out.append(flag)
    return out


Run = ForkedRun | subprocess.Popen[str]


def launch(args: Sequence[str], *, env: dict[str, str], cwd: Path = REPO) -> Run:
    """`bin/ct-fleet ARGS` with its output piped, as a process forked by tests/testkit/cli_forker.py
    (the CLI's imports already done: 1.3 s of CPU less per controller)."""
    return FORKER.popen(list(args), env=env, cwd=cwd)


def run_cli(
    args: Sequence[str], *, env: dict[str, str], cwd: Path = REPO, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`launch`, to its end: subprocess.run with capture_output and text."""
    proc = launch(args, env=env, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(["ct-fleet", *args], proc.returncode, out, err)


def start(runs: Path, *args: str, **extra: str) -> Run:
    return launch(["eval", *last_wins(args)], env=env_for(runs, **extra))


def finish(proc: Run, timeout: int = 400) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # What the run said before it hung is the clue: kill it, then fail with its words.
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        raise AssertionError(
            f"the run did not end within {timeout} s; it said:\n{out[-4000:]}\n{err[-4000:]}"
        ) from None
    return proc.returncode, " ".join(out.split()), err


def fleet_dir(runs: Path) -> Path:
    return next(p for p in runs.iterdir() if p.is_dir() and (p / "manifest.json").exists())


def merged_pairs(runs: Path) -> list[tuple[str, int]]:
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    return [(str(s.id), s.epoch) for s in read_eval_log(str(merged)).samples or []]


def cmdline_of(proc: psutil.Process) -> str:
    """A process's command line, "" once it is gone or a zombie (it may end while we look)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def processes_in(runs: Path, module: str = "") -> list[psutil.Process]:
    """Processes working under runs/, those running `python -m MODULE` when module is given."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            where = proc.cwd()
            args = proc.info["cmdline"] or []
        except psutil.Error:
            continue
        if str(runs) in where and (not module or module in args):
            found.append(proc)
    return found


def running_jobs(runs: Path) -> list[psutil.Process]:
    """Inspect jobs running under runs/: per-process runners, and children of warm runners' servers."""
    servers = processes_in(runs, "ct_fleet.worker.forkserver")
    server_pids = {p.pid for p in servers}
    forked = []
    for proc in servers:
        try:
            if proc.ppid() in server_pids:
                forked.append(proc)
        except psutil.Error:
            continue
    return processes_in(runs, "ct_fleet.worker.runner") + forked


def kill(proc: psutil.Process) -> None:
    """SIGKILL, quietly when the process has already gone (it was listed, then exited)."""
    try:
        proc.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        pass


def read_until(fd: int, marker: bytes, timeout: float = 120) -> bytes:
    """What a terminal's master `fd` shows up to and including `marker`; fails with what it
    showed if nothing more comes for `timeout` seconds."""
    seen = b""
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, seen.decode(errors="replace")
        seen += os.read(fd, 4096)
    return seen


def text_of(path: Path) -> str:
    """A file's text, "" while it does not exist yet (a log its process has still to open)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def wait_for(predicate, timeout: float = 120, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not met in time")


def paused_at(runs: Path, phase: str, timeout: float = 300) -> Path:
    """The marker of a controller under `runs` held at `phase` (CT_FLEET_PAUSE_AT), once it is there:
    its parent is the fleet's run directory; deleting it lets the run go on."""

    def marker() -> Path | None:
        dirs = runs.iterdir() if runs.is_dir() else ()
        return next((m for d in dirs if (m := paused_marker(d, phase)).exists()), None)

    found: Path = wait_for(marker, timeout=timeout)
    return found


def assert_nothing_running(runs: Path, within: float = 60) -> None:
    """Nothing runs under runs/ once the controller is gone: processes that are exiting get
    `within` seconds (a loaded machine is slow to reap), then what is left fails the test."""

    def left() -> list[str]:
        procs = [f"{p.pid} {cmd}" for p in _alive(processes_in(runs)) if (cmd := cmdline_of(p))]
        motos = [str(pid) for f in runs.glob("*/moto.pid") if psutil.pid_exists(pid := int(f.read_text()))]
        return procs + [f"moto server {pid}" for pid in motos]

    deadline = time.monotonic() + within
    while (still := left()) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert still == [], f"still running {within:.0f}s after the run: {still}"


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                proc.cmdline()
                found.append(proc)
        except psutil.Error:
            continue
    return found


def stat(out: str, name: str) -> int:
    match = re.search(rf"{name} (\d+)", out)
    assert match, out
    return int(match.group(1))


def ec2_account(endpoint_url: str, runs: Path, dotenv: str = "") -> dict:
    """What an admin creates once on an account (bucket, worker role and profile, the AMI id
    in SSM), on a moto server standing in for AWS; `.env` holds the secrets workers get."""
    import uuid

    import boto3

    kw = dict(
        endpoint_url=endpoint_url, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    bucket = f"lb-fleet-test-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", **kw).create_bucket(Bucket=bucket)
    iam = boto3.client("iam", **kw)
    try:
        iam.create_role(RoleName="linuxbench-worker", AssumeRolePolicyDocument="{}")
        iam.create_instance_profile(InstanceProfileName="linuxbench-worker")
        iam.add_role_to_instance_profile(InstanceProfileName="linuxbench-worker", RoleName="linuxbench-worker")
    except iam.exceptions.EntityAlreadyExistsException:
        pass
    image = boto3.client("ec2", **kw).register_image(Name=f"worker-{uuid.uuid4().hex[:6]}", RootDeviceName="/dev/sda1")
    param = f"/linuxbench/test-{uuid.uuid4().hex[:6]}/worker-ami-id"
    boto3.client("ssm", **kw).put_parameter(Name=param, Value=image["ImageId"], Type="String")
    runs.mkdir(parents=True, exist_ok=True)
    (runs / ".env").write_text(dotenv)
    return {"kw": kw, "bucket": bucket, "param": param, "runs": runs, "client": lambda svc: boto3.client(svc, **kw)}


def ec2_defaults(defaults: dict[str, str], args: Sequence[str]) -> list[str]:
    """--ec2-arg KEY=VALUE for each default that `args` do not set, then `args`: ct-fleet
    refuses a knob given twice, so a test's own value replaces the default instead."""
    given = {args[i + 1].partition("=")[0] for i in range(len(args) - 1) if args[i] == "--ec2-arg"}
    pairs = [("--ec2-arg", f"{key}={value}") for key, value in defaults.items() if key not in given]
    return [*(part for pair in pairs for part in pair), *args]


def start_ec2(account: dict, *args: str, **extra: str) -> Run:
    """`bin/ct-fleet eval --ec2` against the account's moto server; instances run locally."""
    env = {**env_for(account["runs"], **extra), **account_aws(account)}
    defaults = {"bucket": account["bucket"], "ami_param": account["param"], "auto_confirm": "true"}
    return launch(["eval", "--ec2", *ec2_defaults(defaults, args)], env=env)


def account_aws(account: dict, endpoint: str | None = None) -> dict[str, str]:
    """The AWS variables that point a process at the account's moto server, or at `endpoint`
    (a fault proxy in front of it)."""
    return {
        "AWS_ENDPOINT_URL": endpoint or account["kw"]["endpoint_url"],
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def ec2_env(account: dict, endpoint: str | None = None) -> dict[str, str]:
    """This process's environment, pointed at the account (account_aws) and its runs directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE",)}
    env.update(
        account_aws(account, endpoint),
        CT_FLEET_RUNS=str(account["runs"]),
        CT_FLEET_DOTENV=str(account["runs"] / ".env"),
    )
    return env


def run_ec2(
    account, *args: str, extra_env: dict[str, str] | None = None, endpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The smoke task file (-T sandbox=local) with `bin/ct-fleet eval --ec2` against the account's
    moto server, or `endpoint` (a fault proxy in front of it); small defaults a test's args replace."""
    env = {**ec2_env(account, endpoint), **(extra_env or {})}
    cmd = [
        "eval",
        "--ec2",
        "--task-file",
        "smoke",
        "--epochs",
        "1",
        "-T",
        "sandbox=local",
        *ec2_defaults(
            {
                "bucket": account["bucket"],
                "ami_param": account["param"],
                "auto_confirm": "true",
                "max_workers": "2",
                "concurrency_per_worker": "2",
                "idle_timeout": "5",
            },
            args,
        ),
    ]
    return run_cli(cmd, env=env, timeout=600)


def fleet_secrets_left(account: dict, fleet_id: str) -> list[str]:
    ssm = account["client"]("ssm")
    pages = ssm.get_paginator("get_parameters_by_path").paginate(
        Path=f"/linuxbench/fleet-secrets/{fleet_id}", Recursive=True
    )
    return [p["Name"] for page in pages for p in page["Parameters"]]


def fleet_instances(account: dict, fleet_id: str, states: tuple[str, ...] = ("pending", "running")) -> list[str]:
    ec2 = account["client"]("ec2")
    found = ec2.describe_instances(
        Filters=[{"Name": "tag:FleetId", "Values": [fleet_id]}, {"Name": "instance-state-name", "Values": list(states)}]
    )
    return [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]]


def docker_lines(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], check=True, capture_output=True, text=True, timeout=120).stdout
    return [line for line in out.splitlines() if line.strip()]


def project_leftovers(project: str) -> list[str]:
    """Containers, networks and volumes compose made for `project` that still exist."""
    label = ["--filter", f"label=com.docker.compose.project={project}"]
    return [
        *docker_lines("ps", "-aq", *label),
        *docker_lines("network", "ls", "-q", *label),
        *docker_lines("volume", "ls", "-q", *label),
    ]


def run_instances(run_dir: Path) -> set[str]:
    """The ids of the instances a run directory launched (local instances only)."""
    return {p.name for p in (run_dir / "instances").glob("i-*") if p.is_dir()}


def sandboxes_of(run_dir: Path, label: str) -> list[str]:
    """`label` of each container (running or not) of the run's own instances. By instance,
    not by fleet: another suite of the same commit runs fleets of the same ids on this
    Docker daemon, and its containers are not this run's."""
    fmt = f'{{{{.Label "ct-fleet.instance"}}}}\t{{{{.Label "{label}"}}}}'
    ours = run_instances(run_dir)
    rows = docker_lines("ps", "-a", "--filter", f"label=ct-fleet.fleet={run_dir.name}", "--format", fmt)
    return [value for instance, _, value in (row.partition("\t") for row in rows) if instance in ours]


class SandboxWatch:
    """Sees the sandbox containers of every instance while runs go on: instance id ->
    compose projects. Containers carry their instance's id as a label (the settings'
    compose files), so concurrent runs, of this suite or another, are told apart.

    It reads Docker's event stream (every container created), not `docker ps` now and
    then: a sandbox that lives less than a poll's interval, or a poll slowed by a busy
    machine, would go unseen."""

    FORMAT = '{{index .Actor.Attributes "ct-fleet.instance"}}\t{{index .Actor.Attributes "com.docker.compose.project"}}'

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._since = ""
        self._proc: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)

    def _args(self) -> list[str]:
        return ["--filter", "type=container", "--filter", "event=create", "--filter", "label=ct-fleet.instance"]

    def _add(self, line: str) -> None:
        instance, _, project = line.strip().partition("\t")
        if instance and project:
            with self._lock:
                self.seen.setdefault(instance, set()).add(project)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._add(line)

    def __enter__(self) -> "SandboxWatch":
        # --since replays what happened between this moment and the stream's start.
        self._since = f"{time.time() - 1:.3f}"
        cmd = ["docker", "events", "--since", self._since, *self._args(), "--format", self.FORMAT]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # The runs are over: what the stream has not delivered yet, a bounded query has.
        until = f"{time.time():.3f}"
        for line in docker_lines(
            "events", "--since", self._since, "--until", until, *self._args(), "--format", self.FORMAT
        ):
            self._add(line)
        assert self._proc is not None
        self._proc.terminate()
        self._proc.wait(timeout=30)
        self._thread.join(timeout=30)

    def projects(self, run_dir: Path) -> set[str]:
        """The compose projects seen for the run's instances."""
        return {p for instance in run_instances(run_dir) for p in self.seen.get(instance, ())}

    def leftovers(self, run_dir: Path) -> dict[str, list[str]]:
        """What is left of each project the run's instances ran, and of any container of theirs."""
        left = {p: found for p in sorted(self.projects(run_dir)) if (found := project_leftovers(p))}
        stray = sandboxes_of(run_dir, "com.docker.compose.project")
        if stray:
            left["(containers of the run's instances)"] = stray
        return left


def launch_workers(ec2, *, count: int, ami: str, config, fleet_id: str, launched_by: str, user_data: str, group: str):
    """Workers launched the way WorkerPool launches them: the fleet's template, one instant CreateFleet."""
    from ct_fleet.services import launching

    template = launching.put_launch_template(
        ec2,
        ami=ami,
        config=config,
        fleet_id=fleet_id,
        launched_by=launched_by,
        user_data=user_data,
        security_group_id=group,
    )
    pools, _ = launching.pools_of(ec2, config)
    outcome = launching.create_fleet(
        ec2,
        template_id=template,
        pools=pools,
        count=count,
        market="spot" if config.spot else "on-demand",
        fleet_id=fleet_id,
        launched_by=launched_by,
    )
    assert not outcome.errors, outcome.errors
    return [g.instance_id for g in outcome.launched]


@contextmanager
def model_stub(where: Path, key: str, *options: str) -> Iterator[dict[str, object]]:
    """tests/testkit/openai_stub.py on a loopback port (with its `options`): its base URL and the
    log of what it was sent."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "testkit" / "openai_stub.py"),
            "--port-file",
            str(where / "port"),
            "--log",
            str(where / "log"),
            *options,
        ],
        env={**os.environ, "STUB_API_KEY": key},
    )
    try:
        port = wait_for(lambda: (where / "port").exists() and (where / "port").read_text(), timeout=30)
        yield {"base_url": f"http://127.0.0.1:{port}/v1", "log": where / "log"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def embedded_client(run_dir: Path, service: str):
    """A client of the embedded cloud a local fleet runs on (its moto server's port is in run_dir)."""
    port = (run_dir / "moto.port").read_text().strip()
    key, secret = credentials(run_dir / "moto.log")
    return boto3.client(
        service,
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )
