"""The embedded cloud's instances: each launched instance's user-data run as a local
process tree in its own directory, killed when EC2 (moto) says the instance is gone.

Their Docker sandboxes run on this machine's daemon and would outlive the process tree;
an EC2 instance takes its containers with it, so a killed local instance's containers
(labelled with its id by the settings' compose files) are removed as well."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from ..paths import code_artifacts_dir, sites_dir
from ..sandbox.cleanup import remove_sandboxes
from .metadata_server import MetadataServer

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

SHIMS_DIR = Path(__file__).resolve().parent / "shims"
# What fetch-secrets.sh writes on an instance's disk (worker/lib.sh: LB_SECRETS_ENV). An EC2
# instance's disk goes with it; a local instance's directory stays for debugging, so its
# secrets are wiped when the instance is gone.
SECRETS_FILE = Path("etc/linuxbench/secrets.env")
# Where a local instance's TMPDIR is recorded: like an EC2 instance's /tmp it goes with the
# instance, so the temp directories of jobs and warm runners killed mid-way are not left on
# this machine. It is not under the instance's directory: socket paths must stay short.
TMPDIR_FILE = "tmpdir"
# Marks an instance whose leftovers (secrets, temp directory, sandboxes) were removed.
GONE_FILE = "gone"


def instance_env(
    home: Path, instance_id: str, environ: Mapping[str, str], venv: str = sys.prefix, imds: str = ""
) -> dict[str, str]:
    """What a local instance is told instead of what EC2 provides (the instance's inputs,
    listed in worker/lib.sh): its own root directory, its id, its metadata endpoint (the
    runner's loopback stand-in), the venv it shares with this controller, the caches it
    shares with every other local instance of this machine (code artifacts; installs of a
    fleet's requirements, shared with the controller's probe too), and how it powers
    itself off."""
    return {
        "LB_HOME": str(home),
        "INSTANCE_ID": instance_id,
        "LB_VENV": venv,
        "LB_VENV_PROVIDED": "1",
        "LB_CODE_CACHE": str(code_artifacts_dir(environ)),
        "LB_SITE_CACHE": str(sites_dir(environ)),
        "LB_SHUTDOWN": str(SHIMS_DIR / "shutdown"),
        "CT_IMDS_ENDPOINT": imds,
    }


class LocalInstanceRunner:
    """Runs each launched instance's user-data locally, and kills it when EC2 says it is gone."""

    def __init__(self, ec2: EC2Client, instances_dir: Path, env: dict[str, str]) -> None:
        self.ec2 = ec2
        self.dir = instances_dir
        self.env = env
        # instance id -> process group of its user-data; read back from pid files so that a
        # controller adopting a running fleet can still reap and kill its instances.
        self.procs: dict[str, int] = {}
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.metadata = MetadataServer(instances_dir, power_off=self._power_off)
        for pid_file in instances_dir.glob("*/pid"):
            pid = _recorded(pid_file)
            if pid is not None and _alive(pid):
                self.procs[pid_file.parent.name] = pid
        # Instances of a run that was killed with its workers, of this fleet or of any other
        # in this runs directory (a fleet that is never run again): nobody removed what they
        # left, their secrets among it. Another fleet's instance only once its processes are gone.
        for home in instances_dir.parent.parent.glob(f"*/{instances_dir.name}/*/"):
            if (home / GONE_FILE).exists():
                continue  # the runs dir's history: one stat each, not a look at its processes
            own = home.parent.parent.name == instances_dir.parent.name  # runs/<fleet>/instances/<id>
            if (own and home.name not in self.procs) or (not own and _ended(home)):
                _gone(home)

    def start(self, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            home = self.dir / instance_id
            home.mkdir(parents=True, exist_ok=True)
            attr = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
            script = home / "user-data"
            script.write_bytes(base64.b64decode(attr.get("UserData", {}).get("Value", "")))
            tmp = tempfile.mkdtemp(prefix="ct-instance-", dir=self.env.get("TMPDIR") or None)
            (home / TMPDIR_FILE).write_text(tmp)
            # The shim is also first on PATH: nothing a local instance runs can power off this machine.
            env = {
                **self.env,
                **instance_env(home, instance_id, self.env, imds=self.metadata.endpoint(instance_id)),
                "PATH": f"{SHIMS_DIR}:{self.env['PATH']}",
                "TMPDIR": tmp,
            }
            with open(home / "console.log", "ab") as console:
                # No terminal, as on EC2: an instance must not read (or be hung up with) the
                # launcher's terminal, where the user answers the controller's prompts.
                proc = subprocess.Popen(
                    ["bash", str(script)],
                    cwd=home,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=console,
                    start_new_session=True,
                )
            # With its start time: a pid read back later may name another process by then.
            (home / "pid").write_text(f"{proc.pid} {_started(proc.pid)}")
            self.procs[instance_id] = proc.pid
            self._children[proc.pid] = proc

    def _power_off(self, instance_id: str) -> bool:
        """An instance of this runner powered itself off (its `shutdown` shim): it ends, as
        EC2 ends an instance launched with shutdown behaviour "terminate". False: not ours."""
        if instance_id not in self.procs:
            return False
        self.ec2.terminate_instances(InstanceIds=[instance_id])
        return True

    def wait(self, instance_id: str, timeout: float) -> int:
        """Wait for an instance's user-data (started here) to end; its exit status."""
        return self._children[self.procs[instance_id]].wait(timeout)

    def reap(self, live: list[str]) -> None:
        """Kill the process trees of instances no longer live in EC2 (terminated), and
        terminate in EC2 the live ones whose process tree is gone."""
        for proc in self._children.values():
            proc.poll()  # collect exited children so they do not linger as zombies
        # Killed with the controller, or dead without powering off: on EC2 such a machine is
        # gone and is replaced; here EC2 (moto) has to be told, or the fleet waits for it.
        dead = [i for i in live if (self.dir / i).is_dir() and not (i in self.procs and _alive(self.procs[i]))]
        if dead:
            self.ec2.terminate_instances(InstanceIds=dead)
        for instance_id in set(self.procs) - set(live):
            self._kill(instance_id)
        for home in self.dir.glob("*/"):
            if home.name not in live and home.name not in self.procs:
                _gone(home)

    def _kill(self, instance_id: str) -> None:
        pid = self.procs.pop(instance_id, None)
        if pid is None:
            return
        if _leader_is_another_program(pid, instance_id):
            return  # the instance is long gone and its pid reused: not ours to kill
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child = self._children.pop(pid, None)
        if child:
            child.wait()
        _gone(self.dir / instance_id)

    def stop_all(self) -> None:
        for instance_id in list(self.procs):
            self._kill(instance_id)
        # Every instance of the run is gone now: whatever still carries one of their ids is
        # left over, also what a per-instance removal missed (dockerd finishing a container
        # for a compose client that was killed, or a `docker rm` that timed out on a busy
        # machine). By instance, not only by fleet: a fleet of the same id (same code and
        # command) may be running from another run directory on this Docker daemon.
        ours = {home.name for home in self.dir.glob("*/")}
        if ours:
            remove_sandboxes(ours, fleet=self.dir.parent.name)  # runs/<fleet>/instances (run_layout)
        self.metadata.close()


def _gone(home: Path) -> None:
    """What an EC2 instance takes with it when it is gone: its secrets, its temp directory,
    its sandbox containers. Once per instance: the marker keeps later polls and reruns cheap."""
    if (home / GONE_FILE).exists():
        return
    _wipe(home)
    remove_sandboxes(instance=home.name)
    (home / GONE_FILE).touch()


def _wipe(home: Path) -> None:
    """Its secrets and its temp directory."""
    for path in (home / SECRETS_FILE, (home / SECRETS_FILE).with_suffix(".env.tmp")):
        path.unlink(missing_ok=True)
    try:
        tmp = (home / TMPDIR_FILE).read_text()
    except OSError:
        return
    shutil.rmtree(tmp, ignore_errors=True)
    (home / TMPDIR_FILE).unlink(missing_ok=True)


def _ended(home: Path) -> bool:
    """An instance started here whose processes are all gone: none left in its process group
    but zombies, which its killed controller is no longer there to reap. One with no pid file
    is left alone: it was killed before its user-data started, so it fetched nothing."""
    pid_file = home / "pid"
    if not pid_file.is_file():
        return False
    pid = _recorded(pid_file)
    if pid is None or not _alive(pid):
        return True
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pid and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except (OSError, psutil.Error):
            continue
    return True


def _leader_is_another_program(pid: int, instance_id: str) -> bool:
    """True when pid now runs something other than this instance (its user-data execs other
    scripts, but keeps INSTANCE_ID in its environment). While any process of the instance's
    group lives, the kernel does not hand its id out again."""
    try:
        environ = psutil.Process(pid).environ()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # not even readable: someone else's
    return environ.get("INSTANCE_ID") != instance_id


def _started(pid: int) -> float:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


def _recorded(pid_file: Path) -> int | None:
    """The pid in a pid file if that process is still the one started (same start time);
    killing the group of a reused pid would kill some other process on this machine."""
    try:
        pid_text, _, started = pid_file.read_text().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if not started or abs(_started(pid) - float(started)) > 0.01:
        return None
    return pid


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except OSError:
        return False
    return True
