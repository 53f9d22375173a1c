"""Worker AMI rotation (lib/ct_fleet/ami.py) against a moto server over HTTP.

AMIs are made the way Packer makes them: run a builder instance, CreateImage from it,
then tag the image and its snapshots with CreateTags. (moto's RegisterImage ignores the
block device mappings it is given and invents its own snapshot, and tagging a snapshot
in CreateImage's TagSpecifications is a 500, so neither is used.) moto keeps snapshots
after DeregisterImage, so "the snapshots are gone" really tests that we delete them.

Packer itself is replaced by a small executable put first on PATH (Packer is not AWS):
it talks to the same moto server with boto3, as Packer would talk to AWS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from ct_fleet import ami

REPO = Path(__file__).resolve().parents[2]
REGION = "us-east-1"

FAKE_PACKER = textwrap.dedent(
    '''\
    #!{python}
    """Stands in for `packer` in tests: same arguments, same AWS calls, against moto.
    FAKE_PACKER_MODE: ok (default) | fail (dies after launching, leaving the builder)
                      | fail-after-ami (registers an untagged AMI, then dies)."""
    import json, os, subprocess, sys, uuid
    import boto3

    args = sys.argv[1:]
    with open(os.environ["FAKE_PACKER_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    if args[:1] == ["version"]:
        print("Packer v1.6.6")
        sys.exit(0)
    if args[:1] == ["validate"]:
        sys.exit(int(os.environ.get("FAKE_PACKER_VALIDATE_RC", "0")))
    assert args[0] == "build", args
    assert "-on-error=cleanup" in args
    var = dict(a[len("-var="):].split("=", 1) for a in args if a.startswith("-var="))
    mode = os.environ.get("FAKE_PACKER_MODE", "ok")
    ec2 = boto3.client("ec2", region_name=var["region"])
    say = lambda line: print(line, flush=True)

    say("==> amazon-ebs.worker: Prevalidating AMI Name: linuxbench-worker-x")
    say("==> amazon-ebs.worker: Launching a source AWS instance...")
    run_tags = {{"Name": "ct-fleet-ami-builder", "ManagedBy": "ct-fleet",
                "LaunchedBy": var["launched_by"], "CtFleetBuildId": var["build_id"]}}
    instance = ec2.run_instances(
        ImageId=var["source_ami"] or "ami-0123456789abcdef0", MinCount=1, MaxCount=1,
        InstanceType="t3.micro",
        TagSpecifications=[{{"ResourceType": "instance",
                            "Tags": [{{"Key": k, "Value": v}} for k, v in run_tags.items()]}}],
    )["Instances"][0]["InstanceId"]
    say(f"    amazon-ebs.worker: Instance ID: {{instance}}")
    say("==> amazon-ebs.worker: Provisioning with shell script: /tmp/packer-shell1")
    # The provisioning scripts' step lines, made by their real library, under Packer's prefix.
    steps = subprocess.run(
        ["bash", "-c", 'source "$1"; ct_step install-docker true; ct_step pull-images true', "x",
         {packer_lib!r}], capture_output=True, text=True, check=True,
    )
    for line in steps.stderr.splitlines():
        say(f"    amazon-ebs.worker: {{line}}")
    kind = "incremental" if var["source_ami"] else "fresh"
    description = f"ct-fleet worker ({{kind}} build {{var['build_id']}})"
    if mode == "fail-after-ami":
        ec2.create_image(InstanceId=instance, Name="linuxbench-worker-" + var["build_id"],
                         Description=description)
    if mode.startswith("fail"):
        say("==> amazon-ebs.worker: Script exited with non-zero exit status: 1")
        say("Build 'amazon-ebs.worker' errored: provisioning failed")
        sys.exit(1)  # like a Packer killed mid-build: the builder is left running
    say("==> amazon-ebs.worker: Stopping the source instance...")
    ec2.stop_instances(InstanceIds=[instance])
    say(f"==> amazon-ebs.worker: Creating AMI linuxbench-worker-x from instance {{instance}}")
    image = ec2.create_image(InstanceId=instance, Name="linuxbench-worker-" + var["build_id"],
                             Description=description)["ImageId"]
    say("==> amazon-ebs.worker: Waiting for AMI to become ready...")
    tags = [{{"Key": k, "Value": v}} for k, v in {{
        "Name": "linuxbench-worker-x", "ManagedBy": "ct-fleet", "Component": "worker-ami",
        "BuildKind": kind, "CtFleetBuildId": var["build_id"],
        "CtFleetAmiParam": var["ssm_param"]}}.items()]
    snapshots = [m["Ebs"]["SnapshotId"] for m in
                 ec2.describe_images(ImageIds=[image])["Images"][0]["BlockDeviceMappings"]]
    ec2.create_tags(Resources=[image, *snapshots], Tags=tags)
    say("==> amazon-ebs.worker: Terminating the source AWS instance...")
    ec2.terminate_instances(InstanceIds=[instance])
    say("==> amazon-ebs.worker: Running post-processor: manifest")
    path = var["manifest_path"]
    manifest = json.load(open(path)) if os.path.exists(path) else {{"builds": []}}
    run = str(uuid.uuid4())
    manifest["builds"].append({{"name": "worker", "builder_type": "amazon-ebs",
        "artifact_id": f"{{var['region']}}:{{image}}", "packer_run_uuid": run,
        "custom_data": {{"build_id": var["build_id"], "build_kind": kind}}}})
    manifest["last_run_uuid"] = run
    json.dump(manifest, open(path, "w"))
    say("Build 'amazon-ebs.worker' finished.")
    '''
)


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def ec2(aws_client):
    return aws_client("ec2")


@pytest.fixture
def ssm(aws_client):
    return aws_client("ssm")


@pytest.fixture
def param() -> str:
    """A parameter of its own per test: the moto server is shared by the session."""
    return f"/ct-fleet-test/{uuid.uuid4().hex[:12]}/worker-ami-id"


@pytest.fixture
def fake_packer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_env) -> Path:
    """A `packer` first on PATH; returns the log of its invocations (one JSON argv a line)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "packer"
    exe.write_text(FAKE_PACKER.format(python=sys.executable, packer_lib=str(REPO / "packer" / "scripts" / "lib.sh")))
    exe.chmod(0o755)
    log = tmp_path / "packer-calls.jsonl"
    log.touch()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PACKER_LOG", str(log))
    return log


def bake(ec2, param: str, build_id: str | None = None) -> tuple[str, list[str]]:
    """An AMI as Packer leaves it: CreateImage from a builder, image and snapshots tagged."""
    build_id = build_id or uuid.uuid4().hex[:8]
    instance = ec2.run_instances(ImageId="ami-0123456789abcdef0", MinCount=1, MaxCount=1, InstanceType="t3.micro")[
        "Instances"
    ][0]["InstanceId"]
    image = ec2.create_image(InstanceId=instance, Name=f"linuxbench-worker-{build_id}")["ImageId"]
    ec2.terminate_instances(InstanceIds=[instance])
    snapshots = [
        m["Ebs"]["SnapshotId"] for m in ec2.describe_images(ImageIds=[image])["Images"][0]["BlockDeviceMappings"]
    ]
    assert snapshots
    tags = {
        "ManagedBy": "ct-fleet",
        "Component": "worker-ami",
        "CtFleetBuildId": build_id,
        "CtFleetAmiParam": param,
    }
    ec2.create_tags(Resources=[image, *snapshots], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return image, snapshots


def image_exists(ec2, ami_id: str) -> bool:
    try:
        images = ec2.describe_images(ImageIds=[ami_id])["Images"]
    except ClientError:
        return False
    return any(i.get("State") != "deregistered" for i in images)


def snapshots_exist(ec2, snapshot_ids: list[str]) -> list[str]:
    found = []
    for snapshot_id in snapshot_ids:
        try:
            ec2.describe_snapshots(SnapshotIds=[snapshot_id])
            found.append(snapshot_id)
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "InvalidSnapshot.NotFound"
    return found


def images_for(ec2, param: str) -> list[str]:
    images = ec2.describe_images(Owners=["self"], Filters=[{"Name": "tag:CtFleetAmiParam", "Values": [param]}])[
        "Images"
    ]
    return sorted(i["ImageId"] for i in images)


def live_instances(ec2, build_id: str) -> list[str]:
    reservations = ec2.describe_instances(
        Filters=[
            {"Name": "tag:CtFleetBuildId", "Values": [build_id]},
            {"Name": "instance-state-name", "Values": ami.LIVE_STATES},
        ]
    )["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def ssm_value(ssm, param: str) -> str | None:
    return ami.current_ami_id(ssm, param)


# --------------------------------------------------------------------------- manifest


def write_manifest(path: Path, builds: list[dict], last: str) -> Path:
    path.write_text(json.dumps({"builds": builds, "last_run_uuid": last}))
    return path


def test_parse_manifest_picks_the_last_run(tmp_path: Path) -> None:
    path = write_manifest(
        tmp_path / "m.json",
        [
            {
                "artifact_id": "us-east-1:ami-0aaaaaaaaaaaaaaaa",
                "packer_run_uuid": "r1",
                "custom_data": {"build_id": "b1"},
            },
            {
                "artifact_id": "us-east-1:ami-0bbbbbbbbbbbbbbbb",
                "packer_run_uuid": "r2",
                "custom_data": {"build_id": "b2"},
            },
            {"artifact_id": "us-east-1:ami-0cccccccccccccccc", "packer_run_uuid": "r3"},
        ],
        last="r2",
    )
    entry = ami.parse_manifest(path)
    assert (entry.ami_id, entry.region, entry.packer_run_uuid) == ("ami-0bbbbbbbbbbbbbbbb", "us-east-1", "r2")
    assert entry.custom_data == {"build_id": "b2"}


def test_parse_manifest_multi_region_and_errors(tmp_path: Path) -> None:
    path = write_manifest(
        tmp_path / "m.json",
        [{"artifact_id": "us-east-1:ami-0aaaaaaaaaaaaaaaa,us-west-2:ami-0bbbbbbbbbbbbbbbb", "packer_run_uuid": "r"}],
        last="r",
    )
    assert ami.parse_manifest(path, "us-west-2").ami_id == "ami-0bbbbbbbbbbbbbbbb"
    assert ami.parse_manifest(path).ami_id == "ami-0aaaaaaaaaaaaaaaa"
    with pytest.raises(ami.AmiError, match="no AMI for eu-west-1"):
        ami.parse_manifest(path, "eu-west-1")
    with pytest.raises(ami.AmiError, match="no build for its last run"):
        ami.parse_manifest(write_manifest(tmp_path / "n.json", [{"artifact_id": "x", "packer_run_uuid": "a"}], "b"))
    with pytest.raises(ami.AmiError, match="no AMI in artifact_id"):
        ami.parse_manifest(write_manifest(tmp_path / "o.json", [{"artifact_id": "oops", "packer_run_uuid": "a"}], "a"))
    with pytest.raises(ami.AmiError, match="cannot read"):
        ami.parse_manifest(tmp_path / "missing.json")


def test_packer_phases_from_output() -> None:
    ticks = iter([0.0, 2.0, 5.0, 65.0, 70.0, 400.0, 410.0])
    timings = ami.Timings()
    phases = ami.PackerPhases(timings, clock=lambda: next(ticks))
    for line in [
        "==> amazon-ebs.worker: Launching a source AWS instance...",
        "==> amazon-ebs.worker: Provisioning with shell script: /tmp/a",
        "    amazon-ebs.worker: 2024-05-01T09:00:00Z [ct-fleet-ami] step pull-images: start",
        "    amazon-ebs.worker: 2024-05-01T09:00:55Z [ct-fleet-ami] step pull-images: ok in 55s",
        # Not a provisioning step of ours: another tag, or the old "done in" wording.
        "    amazon-ebs.worker: 2024-05-01T09:00:56Z [other] step stray: ok in 9s",
        "    amazon-ebs.worker: 09:00:57 [ct-fleet-ami] step old-format: done in 9s",
        "==> amazon-ebs.worker: Provisioning with shell script: /tmp/b",
        "==> amazon-ebs.worker: Stopping the source instance...",
        "==> amazon-ebs.worker: Creating AMI linuxbench-worker-1 from instance i-1",
        "==> amazon-ebs.worker: Terminating the source AWS instance...",
    ]:
        phases.feed(line)
    phases.finish()
    assert timings.phases == [
        ("packer: prepare", 2.0),
        ("packer: launch builder", 3.0),
        ("packer: provision", 60.0),
        ("  step pull-images", 55.0),
        ("packer: stop builder", 5.0),
        ("packer: create AMI + snapshots", 330.0),
        ("packer: terminate builder", 10.0),
    ]


def test_read_images_and_vars(tmp_path: Path) -> None:
    images = tmp_path / "images.txt"
    images.write_text("# env images\nrepo/a:1\n\n  repo/b@sha256:abc  # pinned\nrepo/a:1\n")
    assert ami.read_images(images) == ["repo/a:1", "repo/b@sha256:abc"]
    images.write_text("repo/a:1 repo/b:2\n")
    with pytest.raises(ami.BadInput, match="one image per line"):
        ami.read_images(images)
    assert ami.read_images(REPO / "packer" / "images.txt") == []
    assert ami.parse_vars(["instance_type=c6i.4xlarge", "x=a=b"]) == {"instance_type": "c6i.4xlarge", "x": "a=b"}
    with pytest.raises(ami.BadInput):
        ami.parse_vars(["no-equals"])


# --------------------------------------------------------------------------- rotation


def test_rotate_moves_ssm_and_removes_previous_ami_and_snapshots(ec2, ssm, param) -> None:
    old, old_snaps = bake(ec2, param)
    ami.rotate(ec2, ssm, old, param)  # first build: nothing to remove
    assert ssm_value(ssm, param) == old
    new, new_snaps = bake(ec2, param)

    result = ami.rotate(ec2, ssm, new, param)

    assert ssm_value(ssm, param) == new
    assert result.previous_ami_id == old
    assert result.deregistered == [old]
    assert sorted(result.deleted_snapshots) == sorted(old_snaps)
    assert not image_exists(ec2, old)
    assert snapshots_exist(ec2, old_snaps) == []
    assert image_exists(ec2, new) and snapshots_exist(ec2, new_snaps) == new_snaps
    assert images_for(ec2, param) == [new]  # exactly one kept
    assert result.errors == []


def test_rotate_first_build_and_same_id(ec2, ssm, param) -> None:
    image, snaps = bake(ec2, param)
    result = ami.rotate(ec2, ssm, image, param)
    assert (result.previous_ami_id, result.deregistered) == (None, [])
    again = ami.rotate(ec2, ssm, image, param)
    assert (again.previous_ami_id, again.deregistered) == (image, [])
    assert image_exists(ec2, image) and snapshots_exist(ec2, snaps) == snaps


def test_rotate_refuses_an_unavailable_ami(ec2, ssm, param) -> None:
    old, _ = bake(ec2, param)
    ami.rotate(ec2, ssm, old, param)
    with pytest.raises(ami.AmiError, match="left unchanged"):
        ami.rotate(ec2, ssm, "ami-0123456789abcdef0", param)
    assert ssm_value(ssm, param) == old and image_exists(ec2, old)


def test_rotate_sweeps_older_orphans_but_spares_newer_builds(ec2, ssm, param) -> None:
    current, _ = bake(ec2, param)
    ami.rotate(ec2, ssm, current, param)
    orphan, orphan_snaps = bake(ec2, param)  # registered, then its rotation never happened
    new, _ = bake(ec2, param)
    # CreationDate has a one-second resolution: the next image must be of a later second.
    (made,) = ec2.describe_images(ImageIds=[new])["Images"]
    deadline = time.monotonic() + 30
    while time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) <= made["CreationDate"][:19]:
        assert time.monotonic() < deadline, made["CreationDate"]
        time.sleep(0.05)
    newer, _ = bake(ec2, param)  # another build still running: not ours to remove
    other_param = f"{param}-other"
    foreign, _ = bake(ec2, other_param)  # kept for another parameter

    result = ami.rotate(ec2, ssm, new, param)

    assert sorted(result.deregistered) == sorted([current, orphan])
    assert snapshots_exist(ec2, orphan_snaps) == []
    assert images_for(ec2, param) == sorted([new, newer])
    assert image_exists(ec2, foreign)


def test_rotate_leaves_a_missing_previous_alone(ec2, ssm, param) -> None:
    ssm.put_parameter(Name=param, Value="ami-0123456789abcdef0", Type="String")
    new, _ = bake(ec2, param)
    result = ami.rotate(ec2, ssm, new, param)
    assert ssm_value(ssm, param) == new
    assert result.deregistered == [] and "left alone" in result.warnings[0]


def test_cleanup_builders_terminates_only_this_build(ec2) -> None:
    build, other = f"b-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"

    def launch(build_id: str) -> str:
        return ec2.run_instances(
            ImageId="ami-0123456789abcdef0",
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "CtFleetBuildId", "Value": build_id}]}],
        )["Instances"][0]["InstanceId"]

    mine, theirs = launch(build), launch(other)
    assert ami.cleanup_builders(ec2, build) == [mine]
    assert live_instances(ec2, build) == [] and live_instances(ec2, other) == [theirs]
    assert ami.cleanup_builders(ec2, build) == []
    ami.cleanup_builders(ec2, other)


# --------------------------------------------------------------------------- build


def plan(ec2, ssm, param: str, work_dir: Path, **kw) -> ami.BuildPlan:
    return ami.plan_build(
        ec2, ssm, region=REGION, param=param, work_dir=work_dir, instance_profile="", launched_by_value="tester", **kw
    )


def build_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_build_incremental_rotates(tmp_path, ec2, ssm, param, fake_packer) -> None:
    old, old_snaps = bake(ec2, param)
    ami.rotate(ec2, ssm, old, param)

    p = plan(ec2, ssm, param, tmp_path)
    assert (p.kind, p.source_ami) == ("incremental", old)
    lines: list[str] = []
    result = ami.build_ami(ec2, ssm, p, on_line=lines.append)

    assert result.ami_id and result.ami_id != old
    assert ssm_value(ssm, param) == result.ami_id
    assert not image_exists(ec2, old) and snapshots_exist(ec2, old_snaps) == []
    assert images_for(ec2, param) == [result.ami_id]
    assert live_instances(ec2, p.build_id) == []  # the fake terminated its builder itself
    build = [c for c in build_calls(fake_packer) if c[0] == "build"][0]
    assert f"-var=source_ami={old}" in build and f"-var=build_id={p.build_id}" in build
    assert build[-1] == str(ami.PACKER_DIR)
    names = [n for n, _ in result.timings.phases]
    for phase in [
        "packer: launch builder",
        "packer: provision",
        "  step pull-images",
        "packer: create AMI + snapshots",
        "rotate (SSM, deregister, snapshots)",
    ]:
        assert phase in names
    assert "  step install-docker" in names
    assert any("Creating AMI" in line for line in lines)


def test_build_fresh_when_ssm_is_empty_or_asked(tmp_path, ec2, ssm, param, fake_packer) -> None:
    p = plan(ec2, ssm, param, tmp_path)
    assert (p.kind, p.source_ami, p.previous_ami_id) == ("fresh", "", None)
    result = ami.build_ami(ec2, ssm, p, on_line=lambda _: None)
    assert ssm_value(ssm, param) == result.ami_id
    again = plan(ec2, ssm, param, tmp_path, fresh=True)
    assert (again.kind, again.source_ami, again.previous_ami_id) == ("fresh", "", result.ami_id)


@pytest.mark.parametrize("mode", ["fail", "fail-after-ami"])
def test_failed_build_changes_nothing_and_terminates_the_builder(
    tmp_path, ec2, ssm, param, fake_packer, monkeypatch, mode
) -> None:
    old, old_snaps = bake(ec2, param)
    ami.rotate(ec2, ssm, old, param)
    monkeypatch.setenv("FAKE_PACKER_MODE", mode)
    p = plan(ec2, ssm, param, tmp_path)
    timings = ami.Timings()

    with pytest.raises(ami.BuildFailed, match="unchanged"):
        ami.build_ami(ec2, ssm, p, on_line=lambda _: None, timings=timings)

    assert ssm_value(ssm, param) == old
    assert image_exists(ec2, old) and snapshots_exist(ec2, old_snaps) == old_snaps
    assert images_for(ec2, param) == [old]
    assert live_instances(ec2, p.build_id) == []  # the safety net terminated it
    partial = ec2.describe_images(Owners=["self"], Filters=[{"Name": "description", "Values": [f"*{p.build_id}*"]}])[
        "Images"
    ]
    assert partial == []  # a half-made AMI of the failed build is discarded
    assert timings.seconds("terminate leftover builders") is not None


def test_dry_run_validates_and_changes_nothing(tmp_path, ec2, ssm, param, fake_packer) -> None:
    old, _ = bake(ec2, param)
    ami.rotate(ec2, ssm, old, param)
    result = ami.build_ami(ec2, ssm, plan(ec2, ssm, param, tmp_path), dry_run=True, on_line=lambda _: None)
    assert result.dry_run and result.ami_id is None
    assert [c[0] for c in build_calls(fake_packer)] == ["version", "validate"]
    assert ssm_value(ssm, param) == old and images_for(ec2, param) == [old]


def test_plan_rejects_bad_input(ec2, ssm, param, tmp_path) -> None:
    with pytest.raises(ami.BadInput, match="region"):
        ami.plan_build(ec2, ssm, region="mars", param=param, work_dir=tmp_path)
    with pytest.raises(ami.BadInput, match="no image list"):
        ami.plan_build(ec2, ssm, region=REGION, param=param, work_dir=tmp_path, images_file=tmp_path / "none.txt")
    with pytest.raises(ami.BadInput, match="starting with /"):
        ami.plan_build(ec2, ssm, region=REGION, param="relative", work_dir=tmp_path)


def test_plan_falls_back_to_fresh_when_the_ssm_ami_is_gone(tmp_path, ec2, ssm, param) -> None:
    ssm.put_parameter(Name=param, Value="ami-0123456789abcdef0", Type="String")
    p = plan(ec2, ssm, param, tmp_path)
    assert p.kind == "fresh" and p.previous_ami_id == "ami-0123456789abcdef0"
    assert any("not available" in n for n in p.notes)


# --------------------------------------------------------------------------- CLI


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ct_fleet.cli.build_ami", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", "CT_FLEET_MAX_ATTEMPTS": "1"},
    )


def test_cli_build_then_failure(tmp_path, ec2, ssm, param, fake_packer, monkeypatch) -> None:
    # The build's own temp files (the image list Packer reads) go with it, whatever its end.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    ok = run_cli("--ssm-param", param, "--instance-profile", "", "--region", REGION)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    first = ssm_value(ssm, param)
    assert first and f"new worker AMI {first}" in ok.stdout
    assert "phase timings" in ok.stdout and "packer: provision" in ok.stdout
    assert list(tmp.iterdir()) == []

    monkeypatch.setenv("FAKE_PACKER_MODE", "fail")
    bad = run_cli("--ssm-param", param, "--instance-profile", "")
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        f"build-ami: error: packer build failed (exit 1): SSM {param} and the current AMI are unchanged"
    ]
    assert ssm_value(ssm, param) == first and images_for(ec2, param) == [first]
    assert list(tmp.iterdir()) == []


def test_cli_help_and_usage_errors() -> None:
    assert run_cli("--help").returncode == 0
    bad = run_cli("--bogus")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["build-ami: error: No such option '--bogus' (see --help)"]
    assert run_cli("--var", "oops", "--dry-run").returncode == 2


def test_interrupted_build_changes_nothing(tmp_path, ec2, ssm, param, fake_packer) -> None:
    old, _ = bake(ec2, param)
    ami.rotate(ec2, ssm, old, param)
    p = plan(ec2, ssm, param, tmp_path)

    def ctrl_c(line: str) -> None:
        if "Launching" in line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ami.build_ami(ec2, ssm, p, on_line=ctrl_c)
    # The fake Packer ran to the end (registered an AMI): it is discarded, SSM untouched.
    assert ssm_value(ssm, param) == old and images_for(ec2, param) == [old]
    assert live_instances(ec2, p.build_id) == []
