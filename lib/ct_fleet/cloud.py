"""The two clouds behind one protocol; the only module that knows which one it is.

- "embedded": a moto server on loopback plus a local instance runner that executes each
  launched instance's user-data as a process tree in runs/<fleet_id>/instances/<id>/.
- "aws": the real thing. When AWS_ENDPOINT_URL points at loopback (tests running --ec2
  against a moto server) the local instance runner executes the instances there too.

Everything else (controller, worker, scripts) is identical for both.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from . import aws
from .moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer

SHIMS_DIR = Path(__file__).resolve().parent / "shims"
LOCAL_IMAGE_NAME = "ct-fleet-local-worker"
SPOT_NOTICE = "spot-interruption-notice"


class LocalInstanceRunner:
    """Runs each launched instance's user-data locally, and kills it when EC2 says it is gone."""

    def __init__(self, ec2: Any, instances_dir: Path, env: dict[str, str]) -> None:
        self.ec2 = ec2
        self.dir = instances_dir
        self.env = env
        # instance id -> process group of its user-data; read back from pid files so that a
        # controller adopting a running fleet can still reap and kill its instances.
        self.procs: dict[str, int] = {}
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        for pid_file in instances_dir.glob("*/pid"):
            pid = int(pid_file.read_text())
            if _alive(pid):
                self.procs[pid_file.parent.name] = pid

    def start(self, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            home = self.dir / instance_id
            home.mkdir(parents=True, exist_ok=True)
            attr = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
            script = home / "user-data"
            script.write_bytes(base64.b64decode(attr.get("UserData", {}).get("Value", "")))
            env = {
                **self.env,
                "LB_HOME": str(home),
                "INSTANCE_ID": instance_id,
                "PATH": f"{SHIMS_DIR}:{self.env['PATH']}",
                "CT_SPOT_NOTICE_FILE": str(home / SPOT_NOTICE),
            }
            with open(home / "console.log", "ab") as console:
                proc = subprocess.Popen(
                    ["bash", str(script)], cwd=home, env=env, stdout=console, stderr=console, start_new_session=True
                )
            (home / "pid").write_text(str(proc.pid))
            self.procs[instance_id] = proc.pid
            self._children[proc.pid] = proc

    def reap(self, live: list[str]) -> None:
        """Kill the process trees of instances no longer live in EC2 (terminated)."""
        for proc in self._children.values():
            proc.poll()  # collect exited children so they do not linger as zombies
        for instance_id in set(self.procs) - set(live):
            self._kill(instance_id)

    def _kill(self, instance_id: str) -> None:
        pid = self.procs.pop(instance_id, None)
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child = self._children.pop(pid, None)
        if child:
            child.wait()

    def stop_all(self) -> None:
        for instance_id in list(self.procs):
            self._kill(instance_id)


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except OSError:
        return False
    return True


@dataclass
class Cloud:
    kind: str  # "embedded" or "aws"
    region: str
    endpoint_url: str | None = None
    server: MotoServer | None = None
    runner: LocalInstanceRunner | None = None
    _clients: dict[str, Any] = field(default_factory=dict)

    @property
    def embedded(self) -> bool:
        return self.kind == "embedded"

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = aws.client(service, region=self.region)
        return self._clients[service]

    def attach_runner(self, instances_dir: Path) -> None:
        """Run launched instances locally when the EC2 endpoint is on this machine."""
        if self.endpoint_url and urlparse(self.endpoint_url).hostname in ("127.0.0.1", "localhost"):
            env = dict(os.environ)
            env["AWS_REGION"] = self.region
            # Local instances share this venv (its python, and the AWS CLI the scripts call).
            env["CT_FLEET_VENV"] = sys.prefix
            env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
            self.runner = LocalInstanceRunner(self.client("ec2"), instances_dir, env)

    def after_launch(self, instance_ids: list[str]) -> None:
        if self.runner:
            self.runner.start(instance_ids)

    def poll(self, live: list[str]) -> None:
        """Called with the fleet's live instances on every fleet check."""
        if self.server:
            self.server.renew()
        if self.runner:
            self.runner.reap(live)

    def close(self, *, leave_running: bool = False) -> None:
        """Stop local instances and the embedded server, unless the fleet is left running."""
        if leave_running:
            return
        if self.runner:
            self.runner.stop_all()
        if self.server:
            self.server.stop()
            os.environ.pop("AWS_ENDPOINT_URL", None)


def start_embedded(run_root: Path, region: str = "us-east-1") -> Cloud:
    """Start a moto server and point this process (and the workers it launches) at it."""
    run_root.mkdir(parents=True, exist_ok=True)
    # A server left by an earlier controller of this fleet is adopted, with its state.
    server = MotoServer(log_path=run_root / "moto.log").start()
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        os.environ.pop(key, None)
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": server.endpoint_url,
            "AWS_ACCESS_KEY_ID": EMBEDDED_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": EMBEDDED_SECRET_KEY,
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
        }
    )
    aws._session.cache_clear()
    return Cloud(kind="embedded", region=region, endpoint_url=server.endpoint_url, server=server)


def connect_aws(region: str) -> Cloud:
    return Cloud(kind="aws", region=region, endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))


def prepare_embedded_account(cloud: Cloud, *, bucket: str, instance_profile: str, ami_param: str) -> None:
    """What an admin sets up once on AWS (bucket, worker role, AMI) done for the embedded cloud."""
    from . import store

    store.ensure_bucket(cloud.client("s3"), bucket, create=True)
    iam = cloud.client("iam")
    try:
        iam.get_instance_profile(InstanceProfileName=instance_profile)
    except iam.exceptions.NoSuchEntityException:
        iam.create_role(RoleName=instance_profile, AssumeRolePolicyDocument='{"Version":"2012-10-17","Statement":[]}')
        iam.create_instance_profile(InstanceProfileName=instance_profile)
        iam.add_role_to_instance_profile(InstanceProfileName=instance_profile, RoleName=instance_profile)
    ssm = cloud.client("ssm")
    if cloud.server and cloud.server.adopted:
        return
    ec2 = cloud.client("ec2")
    image_id = ec2.register_image(Name=LOCAL_IMAGE_NAME, RootDeviceName="/dev/sda1", Description="local worker")["ImageId"]
    ssm.put_parameter(Name=ami_param, Value=image_id, Type="String", Overwrite=True)

