"""The environment is read where a process starts and passed on (tests/repo/test_layout.py
holds the rule); these pin what the entries read and what a child inherits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ct_fleet.controller.fleet import phases
from ct_fleet.controller.reporting import model_prices
from ct_fleet.environment import inherited
from ct_fleet.services import session
from ct_fleet.settings import SettingSources


@pytest.fixture
def clients():
    before = session.settings()
    yield
    session.configure(before)


def test_client_settings_come_from_the_environment_the_entry_read(clients) -> None:
    read = session.ClientSettings.from_environ(
        {
            "CT_FLEET_RETRY_MODE": "standard",
            "CT_FLEET_MAX_ATTEMPTS": "2",
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_PROFILE": "lab",
            "CT_FLEET_API_LOG": "/tmp/calls.log",
            "CT_FLEET_ROLE": "worker",
        }
    )
    assert read == session.ClientSettings("standard", 2, "eu-west-1", "lab", "/tmp/calls.log", "worker")
    assert session.ClientSettings.from_environ({}) == session.ClientSettings()
    assert session.ClientSettings.from_environ({"CT_FLEET_RETRY_MODE": "bogus"}).retry_mode == "adaptive"
    session.configure(read)
    config = session.client_config()
    assert config.retries == {"mode": "standard", "max_attempts": 2}
    assert session.region_name() == "eu-west-1"


def test_a_client_ignores_the_environment_once_the_entry_has_read_it(clients, monkeypatch) -> None:
    session.configure(session.ClientSettings(max_attempts=3))
    monkeypatch.setenv("CT_FLEET_MAX_ATTEMPTS", "9")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert session.client_config().retries == {"mode": "adaptive", "max_attempts": 3}
    assert session.region_name() == "us-east-1"


def test_a_child_inherits_this_process_environment_with_changes(monkeypatch) -> None:
    monkeypatch.setenv("CT_TEST_KEEP", "1")
    monkeypatch.setenv("CT_TEST_DROP", "1")
    env = inherited({"CT_TEST_ADDED": "x"}, drop=("CT_TEST_DROP",))
    assert env["CT_TEST_KEEP"] == "1" and env["CT_TEST_ADDED"] == "x" and "CT_TEST_DROP" not in env
    assert "CT_TEST_ADDED" not in os.environ  # ours is untouched


def test_the_run_environment_names_its_pause_and_its_model_prices(tmp_path: Path) -> None:
    assert model_prices({}).name == "model_prices.json"
    assert model_prices({"CT_FLEET_MODEL_PRICES": str(tmp_path / "p.json")}) == tmp_path / "p.json"
    phases.begin(tmp_path, {"CT_FLEET_PAUSE_AT": "merge", "CT_FLEET_PAUSE_MAX": "0"})
    phases.reached(phases.MERGE, tmp_path)  # paused for at most 0 s: returns
    assert (tmp_path / "phases.json").is_file()
    phases.begin(tmp_path, {})
    assert phases._pause == (None, 300.0)


def test_a_workers_setting_sources_come_from_its_extra_root(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    assert SettingSources.here({"CT_EXTRA_ROOT": str(tmp_path)}).extra_roots == (tmp_path / "tree",)
    assert SettingSources.here({}).extra_roots == ()
