"""Ec2Config: --ec2-arg parsing, types, defaults per cloud, help text."""

from __future__ import annotations

from dataclasses import fields

import pytest

from ct_fleet.cloud import AwsCloud, EmbeddedCloud
from ct_fleet.controller import config
from ct_fleet.errors import BadInput


def test_values_are_typed():
    got = config.parse_ec2_args(["max_workers=3", "spot=true", "max_cost=2.5", "ami=none", "instance_type=c5.metal"])
    assert got == {"max_workers": 3, "spot": True, "max_cost": 2.5, "ami": None, "instance_type": "c5.metal"}
    assert config.parse_ec2_args(["auto_confirm=No"]) == {"auto_confirm": False}


@pytest.mark.parametrize(
    "arg,message",
    [
        ("max_worker=3", r"unknown --ec2-arg 'max_worker' \(did you mean max_workers\?\)"),
        ("max_workers=lots", r"max_workers=lots: expected an int"),
        ("spot=maybe", r"spot=maybe: expected true or false"),
        ("max_cost=-1", r"must not be negative"),
        ("max_workers", r"write key=value"),
        ("instance_type=", r"needs a str value"),
    ],
)
def test_bad_args_are_refused(arg: str, message: str):
    with pytest.raises(BadInput, match=message):
        config.parse_ec2_args([arg])


def test_later_layers_win():
    run_level = config.from_mapping({"max_workers": 5, "spot": "true"}, "run.yml")
    attack = config.from_mapping({"max_workers": 7}, "run.yml: attack a")
    cfg = config.build_config(run_level, attack)
    assert cfg.max_workers == 7 and cfg.spot is True


def test_defaults_depend_on_the_cloud():
    local = config.Ec2Config().with_defaults(EmbeddedCloud().defaults)
    ec2 = config.Ec2Config().with_defaults(AwsCloud.defaults)
    assert ec2.max_workers == 24 and ec2.concurrency_per_worker == 20 and ec2.idle_timeout == 60
    assert local.max_workers is not None and local.max_workers <= 64
    assert config.Ec2Config(max_workers=3).with_defaults(AwsCloud.defaults).max_workers == 3


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
