"""Ec2Config: --ec2-arg parsing, types, defaults per cloud, help text."""

from __future__ import annotations

from dataclasses import fields

import pytest

from ct_fleet.errors import BadInput
from ct_fleet.protocol import knob_parsing
from ct_fleet.protocol import knobs as config


def test_values_are_typed():
    got = knob_parsing.parse_ec2_args(
        ["max_workers=3", "spot=true", "max_cost=2.5", "ami=none", "instance_type=c5.metal"]
    )
    assert got == {"max_workers": 3, "spot": True, "max_cost": 2.5, "ami": None, "instance_type": "c5.metal"}
    assert knob_parsing.parse_ec2_args(["auto_confirm=No"]) == {"auto_confirm": False}


@pytest.mark.parametrize(
    "arg,message",
    [
        ("max_worker=3", r"unknown --ec2-arg 'max_worker' \(did you mean max_workers\?\)"),
        ("max_workers=lots", r"max_workers=lots: expected a whole number"),
        ("spot=maybe", r"spot=maybe: expected true or false"),
        ("max_cost=-1", r"max_cost=-1: must be more than 0"),
        ("max_workers", r"write key=value"),
        ("instance_type=", r"instance_type needs a value"),
        ("max_workers=0", r"must be at least 1"),
        ("max_workers=2.5", r"expected a whole number"),
        ("volume_gb=0", r"volume_gb=0: must be at least 8"),
        ("volume_gb=20000", r"must be at most 16384"),
        ("max_cost=inf", r"must be a finite number"),
        ("hourly_price=nan", r"must be a finite number"),
        ("visibility_timeout=50000", r"must be at most 43200"),
        ("max_receive_count=0", r"must be at least 1"),
        ("heartbeat_interval=0", r"must be at least 1"),
        ("region=US-East-1", r"not an AWS region name"),
        ("region=us-east-1; rm -rf /", r"not an AWS region name"),
        ("bucket=Results", r"not an S3 bucket name"),
        ("bucket=ab", r"not an S3 bucket name"),
        ("bucket=a..b", r"not an S3 bucket name"),
        ("bucket=10.0.0.1", r"may not look like an IP address"),
        ("bucket=xn--results", r"reserved by AWS"),
        ("instance_type=c6i", r"not an EC2 instance type"),
        ("instance_type=C6I.LARGE", r"not an EC2 instance type"),
        ("ami=ami-12", r"not an AMI id"),
        ("ami=ubuntu", r"write an AMI id"),
        ("ami_param=linuxbench/ami", r"not an SSM parameter path"),
        ("stock_ami_param=/a//b", r"not an SSM parameter path"),
        ("worker_setup=setup.sh", r"<extra-src basename>/<path>"),
        ("worker_setup=tree/../../etc/passwd", r"inside its extra-src tree"),
        ("worker_setup=tree/$(id).sh", r"<extra-src basename>/<path>"),
        ("worker_user=Root User", r"not a Linux user name"),
        ("security_group=sg-0123", r"not starting with sg-"),
        ("instance_profile=a b", r"not an IAM instance profile name"),
        ("resume=xyz", r"not a fleet id"),
        ("instance_type=a\nb", r"instance_type='a\\nb'"),
    ],
)
def test_bad_args_are_refused(arg: str, message: str):
    with pytest.raises(BadInput, match=message):
        knob_parsing.parse_ec2_args([arg])


def test_values_from_yaml_keep_their_types():
    assert knob_parsing.from_mapping({"max_workers": 4, "spot": True, "max_cost": 2}, "run.yml") == {
        "max_workers": 4,
        "spot": True,
        "max_cost": 2.0,
    }
    with pytest.raises(BadInput, match=r"run.yml: max_workers=True: expected a number"):
        knob_parsing.from_mapping({"max_workers": True}, "run.yml")
    with pytest.raises(BadInput, match=r"instance_type=3: expected text"):
        knob_parsing.from_mapping({"instance_type": 3}, "run.yml")
    with pytest.raises(BadInput, match=r"max_workers: expected a single value, not a list"):
        knob_parsing.from_mapping({"max_workers": [1, 2]}, "run.yml")


@pytest.mark.parametrize(
    "args,message",
    [
        (["visibility_timeout=10"], r"visibility_timeout=10 must be at least 2 x heartbeat_interval \(60s\)"),
        (["visibility_timeout=5", "heartbeat_interval=3"], r"at least 2 x heartbeat_interval \(6s\)"),
        (["new_fleet=true", "resume=0123456789ab"], r"contradict"),
    ],
)
def test_rules_between_knobs(args: list[str], message: str):
    with pytest.raises(BadInput, match=message):
        knob_parsing.build_config(knob_parsing.parse_ec2_args(args)).for_cloud("aws", "us-east-1")


def test_knobs_between_rules_accept_the_defaults_and_small_test_values():
    config.Ec2Config().for_cloud("aws", "us-east-1")
    knob_parsing.build_config(knob_parsing.parse_ec2_args(["visibility_timeout=4", "heartbeat_interval=2"])).for_cloud(
        "aws", "us-east-1"
    )


def test_later_layers_win():
    run_level = knob_parsing.from_mapping({"max_workers": 5, "spot": "true"}, "run.yml")
    attack = knob_parsing.from_mapping({"max_workers": 7}, "run.yml: attack a")
    cfg = knob_parsing.build_config(run_level, attack)
    assert cfg.max_workers == 7 and cfg.spot is True


def test_defaults_depend_on_the_cloud():
    local = config.Ec2Config().for_cloud("embedded", "us-east-1")
    ec2 = config.Ec2Config().for_cloud("aws", "us-east-1")
    assert ec2.max_workers == 24 and ec2.concurrency_per_worker == 20 and ec2.idle_timeout == 60
    assert local.max_workers is not None and local.max_workers <= 64
    assert config.Ec2Config(max_workers=3).for_cloud("aws", "us-east-1").max_workers == 3


def test_help_lists_every_knob_with_its_default():
    text = config.help_table()
    for f in fields(config.Ec2Config):
        assert f"{f.name}=" in text
    assert "sample_time_limit=3600" in text
    for required in (
        "max_workers",
        "concurrency_per_worker",
        "instance_type",
        "ami",
        "region",
        "estimate",
        "auto_confirm",
        "new_fleet",
        "worker_setup",
        "worker_user",
        "spot",
        "max_cost",
        "sample_time_limit",
    ):
        assert required in config.knob_names()
