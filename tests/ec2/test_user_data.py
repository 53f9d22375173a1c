"""User-data cannot be injected: hostile text in every fleet setting (every FleetEnv field,
and the environment variables that feed them) reaches the worker byte-exact, and nothing
else runs.

Each boot test launches one instance in moto with the real rendered user-data, and the
embedded cloud's LocalInstanceRunner runs it as it runs every local worker: the boot kit's
bootstrap fetches a code artifact from moto whose job loop only records its environment.
The payloads would each create a canary file if any of them reached a shell as code; one
boot carries them all, several to a field, and any field whose quoting failed would also
arrive changed or stop the boot.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import typing
import uuid
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from ct_fleet.cloud import AwsCloud
from ct_fleet.cloud.local_instances import LocalInstanceRunner
from ct_fleet.controller.fleet import FleetRun
from ct_fleet.controller.planning import Capacity, FleetSpec, preflight
from ct_fleet.errors import BadInput
from ct_fleet.protocol import Ec2Config, FleetEnv, artifact_key, knobs, log_key, steplog
from ct_fleet.protocol.user_data import USER_DATA_LIMIT, render_user_data

REPO = Path(__file__).resolve().parents[2]
CANARY = "@CANARY@"  # replaced by the case's canary path

# Each one alone would touch the canary if the transport let it reach a shell.
PAYLOADS = {
    "old heredoc terminator": "a\nFLEET_ENV\ntouch @CANARY@\nb",
    "EOF line": "a\nEOF\ntouch @CANARY@",
    "command substitution": "$(touch @CANARY@)",
    "backticks": "`touch @CANARY@`",
    "single quote": "x'; touch @CANARY@; echo '",
    "double quote": 'x"; touch @CANARY@; echo "',
    "semicolon": "x; touch @CANARY@",
    "and-and": "x && touch @CANARY@ && y",
    "newline": "x\ntouch @CANARY@\n",
    "placeholders": "@FLEET_ENV@ @BOOT_KIT@ '$(touch @CANARY@)'",
    "expansions": "${IFS}touch${IFS}@CANARY@ $((6*7)) ~root * ?(x) !! \\$HOME \\",
    "binary-ish": "\x01\x02\x07\x08\t\x0b\x0c\r\x1b[31m\x7f é\u200b\udcff\udc80 -e --help\n\n",
}
# What the bootstrap consumes before the job loop (a hostile value ends the boot there, on
# purpose): checked in fleet.env and the log. Every other field reaches the job loop.
BOOT_FIELDS = {"BUCKET", "CODE_SHA", "AWS_REGION", "WORKER_USER"}
# fleet.env name -> knob, for the knobs that reach workers (protocol/knobs.py)
KNOB_OF = {knobs.info(f).worker: f.name for f in knobs.knob_fields() if knobs.info(f).worker}
KNOB_TYPES = typing.get_type_hints(Ec2Config)
STR_KNOBS = [
    name for name, knob in KNOB_OF.items() if str in typing.get_args(KNOB_TYPES[knob]) or KNOB_TYPES[knob] is str
]
STR_FIELDS = [f.name for f in fields(FleetEnv) if f.name != "knobs"] + STR_KNOBS
WORKER_FIELDS = [name for name in STR_FIELDS if name not in BOOT_FIELDS]
BOOT_TIMEOUT = 180

# The code artifact's job loop: record the environment it was started with.
DUMP_WORKER = """\
import json, os
from ct_fleet.protocol import FleetEnv
json.dump(
    {"environ": {k.decode("latin-1"): v.hex() for k, v in os.environb.items()},
     "fleet_env": repr(FleetEnv.from_env(os.environ))},
    open(os.environ["INJECTION_DUMP"], "w"),
)
"""
# Steps between fetch-code and run-worker that would use the hostile values against AWS
# or the system (SSM, docker, settings, extra-src): they run elsewhere in the tests.
STUB_STEPS = ("fetch-secrets", "docker-login", "settings-pull", "worker-setup")


def _knobs(**values: Any) -> Ec2Config:
    """The EC2 defaults with `values`, unchecked (a test may hand the transport anything)."""
    return replace(Ec2Config().for_cloud("aws", "us-east-1"), **values)


def _raw(value: str) -> bytes:
    return value.encode("utf-8", errors="surrogateescape")


@pytest.fixture(scope="module")
def code_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repo's worker scripts and library, with the job loop replaced by DUMP_WORKER."""
    root = tmp_path_factory.mktemp("code")
    shutil.copytree(REPO / "worker", root / "worker")
    shutil.copytree(REPO / "lib", root / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    for step in STUB_STEPS:
        (root / "worker" / f"{step}.sh").write_text("#!/usr/bin/env bash\necho stub step\n")
    (root / "lib" / "ct_fleet" / "worker" / "__main__.py").write_text(DUMP_WORKER)
    return root


@pytest.fixture
def fleet(aws_env: dict[str, str], aws_client: Any, code_tree: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A bucket holding the code artifact, an image to launch, and a local instance runner."""
    s3, ec2 = aws_client("s3"), aws_client("ec2")
    bucket, sha = f"inj-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex + "00000000"
    s3.create_bucket(Bucket=bucket)
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as tar:
        tar.add(code_tree, arcname=".")
    s3.put_object(Bucket=bucket, Key=artifact_key(sha), Body=tarball.getvalue())
    image = ec2.register_image(Name=f"inj-{bucket}", RootDeviceName="/dev/sda1")["ImageId"]
    env = {**os.environ, "INJECTION_DUMP": str(tmp_path / "dump.json")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    runner = LocalInstanceRunner(ec2, tmp_path / "instances", env)
    yield {"s3": s3, "ec2": ec2, "bucket": bucket, "sha": sha, "image": image, "runner": runner, "dir": tmp_path}
    runner.stop_all()


def boot(fleet: dict[str, Any], env: FleetEnv) -> tuple[int, Path, str]:
    """Launch one instance with env's user-data and run it to its end: (status, home, log)."""
    user_data = render_user_data(env)
    assert len(user_data.encode()) <= USER_DATA_LIMIT
    ec2 = fleet["ec2"]
    (instance_id,) = [
        i["InstanceId"]
        for i in ec2.run_instances(ImageId=fleet["image"], MinCount=1, MaxCount=1, UserData=user_data)["Instances"]
    ]
    runner = fleet["runner"]
    runner.start([instance_id])
    pgid = runner.procs[instance_id]
    status = runner.wait(instance_id, BOOT_TIMEOUT)
    _settle(pgid)
    home = fleet["dir"] / "instances" / instance_id
    log = home / "var" / "log" / "linuxbench-bootstrap.log"
    return status, home, log.read_text(errors="replace") if log.exists() else ""


def _settle(pgid: int, timeout: float = 120) -> None:
    """Wait for what the user-data left behind (the log's tee) to finish writing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for proc in psutil.process_iter(["status"]):
            try:
                if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(proc.pid)
            except (ProcessLookupError, psutil.Error):
                continue
        if not alive:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes of instance group {pgid} still running after {timeout}s")


def sourced(fleet_env_file: Path, names: list[str]) -> dict[str, bytes]:
    """What bash holds after sourcing fleet.env, byte for byte."""
    out = subprocess.run(
        ["bash", "-c", 'source "$1"; shift; for n; do printf "%s\\0" "${!n-}"; done', "x", str(fleet_env_file), *names],
        capture_output=True,
        check=True,
    ).stdout
    return dict(zip(names, out.split(b"\0")[:-1], strict=True))


# Payloads per field: with four fields or more, one boot carries every payload.
PER_FIELD = 3


def payloads_for(index: int, canary: Path) -> str:
    """The payloads of the field at INDEX: PER_FIELD of them one after another, the next
    field starting where this one ends (each field writes them in its own order)."""
    texts = list(PAYLOADS.values())
    start = index * PER_FIELD
    chosen = [texts[(start + k) % len(texts)] for k in range(PER_FIELD)]
    return "".join(chosen).replace(CANARY, str(canary))


def hostile(canary: Path, names: list[str], base: FleetEnv) -> FleetEnv:
    """base with payloads in each named field, prefixed by the field's name (no two alike).
    Knobs get theirs unchecked: the transport is under test, not the knobs' rules."""
    assert len(names) * PER_FIELD >= len(PAYLOADS), "too few fields to carry every payload"
    values = {name: f"{name}:{payloads_for(i, canary)}" for i, name in enumerate(names)}
    own = {name: value for name, value in values.items() if name not in KNOB_OF}
    knob_values = {KNOB_OF[name]: value for name, value in values.items() if name in KNOB_OF}
    return replace(base, knobs=replace(base.knobs, **knob_values), **own)


def from_environment(payload: str, canary: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The fields the controller takes from its environment, through the code that reads them."""
    text = payload.replace(CANARY, str(canary))
    monkeypatch.setenv("DOCKER_ORG_NAME_SSM_PARAM", f"{preflight.DOCKER_PARAM_PREFIX}name{text}")
    monkeypatch.setenv("DOCKER_ORG_PAT_SSM_PARAM", f"{preflight.DOCKER_PARAM_PREFIX}pat{text}")
    monkeypatch.setenv("DOCKER_REGISTRY", f"registry.example{text}")
    try:
        name, pat = preflight.docker_auth_params(dict(os.environ))
        registry = preflight.docker_registry(dict(os.environ))
    except BadInput as exc:
        # Refused before anything is created: the value never reaches user-data at all
        # (the fields themselves are still sent hostile values through FleetEnv above).
        assert "\n" not in str(exc).split(":", 1)[0]
        return {}
    return {"DOCKER_ORG_NAME_SSM_PARAM": name, "DOCKER_ORG_PAT_SSM_PARAM": pat, "DOCKER_REGISTRY": registry}


def test_every_string_setting_is_covered() -> None:
    """Every text field is tried by one of the two boot tests (a renamed boot field fails
    here); the other knobs that travel are int or bool, which FleetEnv refuses to hold text in."""
    assert BOOT_FIELDS <= set(STR_FIELDS) and len(WORKER_FIELDS) == len(STR_FIELDS) - len(BOOT_FIELDS) > 0
    assert {f.type for f in fields(FleetEnv) if f.name != "knobs"} == {"str"}
    others = {KNOB_TYPES[knob] for name, knob in KNOB_OF.items() if name not in STR_KNOBS}
    assert others <= {int, bool, int | None, bool | None}, others


def test_hostile_settings_reach_the_job_loop_exactly(
    fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One boot: every payload, each in several fields and each field with several."""
    canary = tmp_path / "CANARY"
    base = FleetEnv(FLEET_ID="f", knobs=_knobs(bucket=fleet["bucket"]), CODE_SHA=fleet["sha"])
    env = hostile(canary, WORKER_FIELDS, base)
    for payload in PAYLOADS.values():
        env = replace(env, **from_environment(payload, canary, monkeypatch))

    status, home, log = boot(fleet, env)

    assert not canary.exists(), f"a setting ran as shell code:\n{log[-3000:]}"
    expected = env.to_env()
    got = sourced(home / "etc" / "linuxbench" / "fleet.env", list(expected))
    assert got == {name: _raw(value) for name, value in expected.items()}
    assert status == 0, log[-3000:]
    dump = json.loads((tmp_path / "dump.json").read_text())
    for name, value in expected.items():
        assert bytes.fromhex(dump["environ"][name]) == _raw(value), name
    assert dump["fleet_env"] == repr(env)
    assert "bootstrap finished" in log


def test_hostile_boot_settings_arrive_exactly_and_stop_the_boot(fleet: dict[str, Any], tmp_path: Path) -> None:
    """One boot: the four boot fields carry every payload between them."""
    canary = tmp_path / "CANARY"
    base = FleetEnv(FLEET_ID="f", knobs=_knobs(bucket=fleet["bucket"]), CODE_SHA=fleet["sha"])
    env = hostile(canary, sorted(BOOT_FIELDS), base)

    status, home, log = boot(fleet, env)

    assert not canary.exists(), f"a setting ran as shell code:\n{log[-3000:]}"
    expected = env.to_env()
    got = sourced(home / "etc" / "linuxbench" / "fleet.env", list(expected))
    assert got == {name: _raw(value) for name, value in expected.items()}
    # The boot stops at the step that needs the value, says so, and powers off.
    assert status != 0
    failure = steplog.first_failure(log)
    assert failure is not None and failure.step.name == "fetch-code", log[-3000:]
    assert "shutting down" in log
    assert not (tmp_path / "dump.json").exists()


def test_a_hostile_region_from_the_environment_is_carried_or_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS_REGION from the environment becomes the fleet's region, which reaches fleet.env
    quoted (booting with a hostile AWS_REGION is tried above)."""
    text = PAYLOADS["old heredoc terminator"]
    monkeypatch.setenv("AWS_REGION", text)
    try:
        region = Ec2Config().for_cloud("aws", os.environ["AWS_REGION"]).region
    except BadInput:
        return  # refused before anything was created: as good as carried
    env = FleetEnv(FLEET_ID="f", knobs=_knobs(bucket="b", region=region))
    token = re.search(r"^FLEET_ENV='([A-Za-z0-9+/=]+)'$", render_user_data(env), re.M)
    assert token and f"export AWS_REGION={_shell_quote(text)}\n" in base64.b64decode(token[1]).decode()


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_settings_that_cannot_travel_are_refused() -> None:
    with pytest.raises(BadInput, match="NUL"):
        FleetEnv(FLEET_ID="f\0g", knobs=_knobs(bucket="b"))
    with pytest.raises(BadInput, match="NUL"):
        FleetEnv(FLEET_ID="f", knobs=_knobs(bucket="b\0c"))
    with pytest.raises(BadInput, match="CONCURRENCY"):
        FleetEnv(FLEET_ID="f", knobs=_knobs(concurrency_per_worker="3\nFLEET_ENV\n"))
    with pytest.raises(BadInput, match="SPOT"):
        FleetEnv(FLEET_ID="f", knobs=_knobs(spot="true"))


def test_user_data_stays_under_ec2s_limit_and_says_so_when_not() -> None:
    typical = FleetEnv(
        FLEET_ID="a" * 16,
        knobs=_knobs(bucket="lb-fleet-results-migrated"),
        CODE_SHA="0" * 40,
        SETTINGS="toyarena basharena",
        SECRET_NAMES="ANTHROPIC_API_KEY GH_TOKEN OPENAI_API_KEY",
        SECRET_PREFIX="/linuxbench/fleet/" + "a" * 16,
        EXTRA_SRC_KEYS=" ".join(f"artifacts/extra-{i:02d}-{'0' * 16}.tar.gz" for i in range(10)),
    )
    size = len(render_user_data(typical).encode())
    # Room to spare: a fleet with ten extra-src trees uses under three quarters (11.9 KB,
    # the boot kit's scripts most of it; 11.4 KB before fetch-code.sh's machine cache).
    assert size <= USER_DATA_LIMIT * 0.75, size
    with pytest.raises(BadInput, match="over EC2's 16384"):
        render_user_data(replace(typical, SETTINGS="x" * USER_DATA_LIMIT))


def test_workers_that_keep_dying_are_reported_by_their_failed_step(
    fleet: dict[str, Any], aws_env: dict[str, str], tmp_path: Path
) -> None:
    """The controller's reason (WorkerPool.bootstrap_failure) read from a real uploaded log."""
    fleet_id = f"dying-{uuid.uuid4().hex[:8]}"
    env = FleetEnv(FLEET_ID=fleet_id, knobs=_knobs(bucket=fleet["bucket"]), CODE_SHA="f" * 40)  # no such artifact
    status, home, _ = boot(fleet, env)
    assert status != 0
    text = fleet["s3"].get_object(Bucket=fleet["bucket"], Key=log_key(fleet_id, home.name))["Body"].read().decode()
    failure = steplog.first_failure(text)
    assert failure is not None and (failure.step.name, failure.step.status) == ("fetch-code", 1)

    cfg = Ec2Config(bucket=fleet["bucket"]).for_cloud("aws", "us-east-1")
    spec = FleetSpec(fleet_id, [], [], "mockllm/model", 1, "f" * 40, cfg, policy="honest")
    cloud = AwsCloud(region="us-east-1", endpoint_url=aws_env["AWS_ENDPOINT_URL"])
    ctl = FleetRun(
        cloud, spec, tmp_path / "run", launched_by="alice", warn=lambda text: None, capacity=Capacity([], "", 1)
    )
    ctl.pool.launched = ["i-never-booted", home.name]
    reason = ctl.pool.bootstrap_failure()
    assert reason.startswith("workers keep dying: step fetch-code FAILED (exit 1) after "), reason
    assert "404" in reason and f"s3://{fleet['bucket']}/{log_key(fleet_id, home.name)}" in reason
