"""Ctrl-C and SIGTERM at each phase of a run leave nothing behind; SIGKILL leaves secrets
that the next run (of any fleet) or `cloud status --clean` removes once their workers are gone.

Runs are `--ec2` against a moto server that outlives them, so what is left in "AWS" can be
checked afterwards. Phases are reached deterministically: CT_FLEET_PAUSE_AT=<phase> makes
the controller write runs/<fleet>/paused-at-<phase> and wait there for the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ct_fleet.cloud.local_instances import SECRETS_FILE, TMPDIR_FILE
from testkit.fleet import (
    LOCAL,
    REPO,
    account_aws,
    assert_nothing_running,
    ec2_account,
    env_for,
    fleet_instances,
    fleet_secrets_left,
    paused_at,
    processes_in,
    run_cli,
    start_ec2,
    wait_for,
)

CANARY = "canary-" + uuid.uuid4().hex
# The fleet's phases, not Docker: Inspect's local sandbox.
ONE_JOB = [
    "-e",
    "web",
    "-t",
    "fix_login",
    "-T",
    "sandbox=local",
    "--ec2-arg",
    "max_workers=1",
    "--ec2-arg",
    "idle_timeout=3",
]
NEW = ["--ec2-arg", "new_fleet=true"]


@pytest.fixture(scope="module")
def base_account(moto_server, tmp_path_factory: pytest.TempPathFactory):
    return ec2_account(moto_server.endpoint_url, tmp_path_factory.mktemp("acct"))


@pytest.fixture
def account(base_account, tmp_path: Path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / ".env").write_text(f"ANTHROPIC_API_KEY={CANARY}\n")
    return {**base_account, "runs": runs}


def paused_fleet(account, phase: str) -> str:
    marker = paused_at(account["runs"], phase)
    return marker.parent.name


def nothing_left(account, fleet_id: str) -> None:
    assert fleet_secrets_left(account, fleet_id) == []
    assert fleet_instances(account, fleet_id, ("pending", "running", "stopping", "stopped")) == []
    assert not list(account["runs"].glob("*/instances/*/etc/linuxbench/secrets.env"))
    assert_nothing_running(account["runs"])


@pytest.mark.faults
# Each phase once and each signal at two phases; both signals where workers run. The two
# signals take one path (controller/fleet/interrupts.py), so every pair was twice the suite's time for it.
@pytest.mark.parametrize(
    ("phase", "sig"),
    [
        ("enqueue", signal.SIGTERM),
        ("tracking", signal.SIGINT),
        ("tracking", signal.SIGTERM),
        ("end-wait", signal.SIGINT),
        ("merge", signal.SIGTERM),
    ],
    ids=["enqueue-SIGTERM", "tracking-SIGINT", "tracking-SIGTERM", "end-wait-SIGINT", "merge-SIGTERM"],
)
def test_interrupt_at_any_phase_leaves_no_secret_and_no_worker(account, phase: str, sig: int):
    # Workers linger after the last job (idle_timeout) so that the end-of-run wait has some to wait for.
    idle = "60" if phase == "end-wait" else "3"
    one_job = [a.replace("idle_timeout=3", f"idle_timeout={idle}") for a in ONE_JOB]
    proc = start_ec2(account, *one_job, *NEW, CT_FLEET_PAUSE_AT=phase)
    fleet_id = paused_fleet(account, phase)
    if phase != "merge":  # a complete run deletes its queues before the merge
        assert account["client"]("sqs").get_queue_url(QueueName=f"lb-fleet-{fleet_id}-work")["QueueUrl"]
    if phase in ("tracking", "end-wait"):
        # What a careless teardown leaves: the workers and their secrets exist right now.
        assert fleet_instances(account, fleet_id) and fleet_secrets_left(account, fleet_id)
    if phase in ("end-wait", "merge"):
        assert list(account["runs"].glob(f"{fleet_id}/jobs/*.evaljob"))
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, out + err
    assert f"fleet {fleet_id} stopped" in err and f"resume={fleet_id}" in err
    assert "Traceback" not in out + err
    nothing_left(account, fleet_id)
    if (phase, sig) == ("tracking", signal.SIGTERM):
        _resumes_by_its_id(account, fleet_id)


def _resumes_by_its_id(account, fleet_id: str) -> None:
    """A stopped new_fleet=true fleet is resumed by naming its id (the same command would
    start yet another new fleet)."""
    again = start_ec2(account, *ONE_JOB, "--ec2-arg", f"resume={fleet_id}")
    out, err = again.communicate(timeout=400)
    assert again.returncode == 0, out + err
    assert f"fleet {fleet_id}: 1 jobs" in " ".join(out.split())
    nothing_left(account, fleet_id)


@pytest.mark.faults
def test_secrets_of_a_killed_controller_are_swept_once_its_workers_are_gone(account):
    proc = start_ec2(account, *ONE_JOB, *NEW, CT_FLEET_PAUSE_AT="tracking")
    fleet_id = paused_fleet(account, "tracking")
    proc.send_signal(signal.SIGKILL)  # no teardown at all
    proc.communicate()
    left = fleet_secrets_left(account, fleet_id)
    assert left, "a killed controller leaves its workers' secrets"
    # Its workers run on, finish the job and shut themselves down.
    wait_for(lambda: not fleet_instances(account, fleet_id), timeout=300)
    wait_for(lambda: not processes_in(account["runs"]), timeout=60)
    env = env_for(account["runs"])
    env.update(account_aws(account))
    status = run_cli(["cloud", "status", "--clean"], env=env, timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"deleted {len(left)} secret(s) of fleet {fleet_id}" in status.stdout
    nothing_left(account, fleet_id)


@pytest.mark.faults
def test_the_next_eval_of_any_fleet_sweeps_secrets_of_dead_fleets(account):
    """In SSM, and on this machine: what its local instances fetched (their secrets.env) and
    their temporary directories, which a fleet that is never run again would keep."""
    proc = start_ec2(account, *ONE_JOB, *NEW, CT_FLEET_PAUSE_AT="tracking")
    fleet_id = paused_fleet(account, "tracking")
    homes = list(account["runs"].glob(f"{fleet_id}/instances/*/"))
    fetched = wait_for(lambda: [h for h in homes if (h / SECRETS_FILE).is_file()], timeout=180)
    temps = [Path((home / TMPDIR_FILE).read_text()) for home in homes]
    assert temps and all(t.is_dir() for t in temps)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert fleet_secrets_left(account, fleet_id)
    # An operator terminates the workers; what EC2 would do to their processes is done here.
    account["client"]("ec2").terminate_instances(InstanceIds=fleet_instances(account, fleet_id))
    for pid_file in account["runs"].glob(f"{fleet_id}/instances/*/pid"):
        try:
            os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Another fleet (other tasks), stopped at once: its start is what sweeps.
    other = start_ec2(
        account, "-e", "ops", "-t", "enable_tls", *LOCAL, "--ec2-arg", "new_fleet=true", CT_FLEET_PAUSE_AT="enqueue"
    )
    other_id = paused_fleet(account, "enqueue")
    assert other_id != fleet_id
    other.send_signal(signal.SIGTERM)
    out, err = other.communicate(timeout=180)
    assert "left by stopped fleet(s)" in err and fleet_id in err, err
    assert fleet_secrets_left(account, fleet_id) == []
    assert [h for h in fetched if (h / SECRETS_FILE).exists()] == []
    assert [t for t in temps if t.exists()] == []
    assert_nothing_running(account["runs"])


@pytest.mark.faults
def test_leave_running_keeps_workers_and_secrets_for_the_resume(account):
    import pty

    master, slave = pty.openpty()
    env = env_for(account["runs"], CT_FLEET_PAUSE_AT="tracking")
    env.update(account_aws(account))
    # Its worker must still be there when the resume starts, however slow the machine: it
    # waits for the end-of-run signal, not for 3 idle seconds after its one job.
    staying = [a.replace("idle_timeout=3", "idle_timeout=600") for a in ONE_JOB]
    args = [*staying, *NEW, "--ec2-arg", f"bucket={account['bucket']}", "--ec2-arg", f"ami_param={account['param']}"]
    proc = subprocess.Popen(
        [str(REPO / "bin" / "ct-fleet"), "eval", "--ec2", "--ec2-arg", "auto_confirm=true", *args],
        cwd=REPO,
        env=env,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(slave)
    fleet_id = paused_fleet(account, "tracking")
    proc.send_signal(signal.SIGINT)
    os.write(master, b"leave\n")  # the answer to "stop the fleet, or leave its workers running?"
    out, err = proc.communicate(timeout=180)
    os.close(master)
    assert proc.returncode == 130, out + err
    assert f"fleet {fleet_id} left running" in err
    assert fleet_instances(account, fleet_id) and fleet_secrets_left(account, fleet_id)
    again = start_ec2(account, *staying, "--ec2-arg", f"resume={fleet_id}")
    try:
        out, err = again.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        again.kill()
        out, err = again.communicate()
        raise AssertionError(out[-3000:] + err[-3000:]) from None
    assert again.returncode == 0, out + err
    assert "adopting the running fleet" in err
    nothing_left(account, fleet_id)


def test_children_of_the_suite_take_sigint_even_under_nohup():
    """The SIGINT drills above rely on it; conftest undoes `nohup ... &`'s ignored SIGINT."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
