"""Settings as plugins: one from an installed distribution (a wheel built here, declaring
a `ct_fleet.settings` entry point) beside the bundled one, in a single two-setting fleet;
and a setting that does not import on the workers, which stops the fleet at once.

The wheel reaches the workers only through setting_requirements (shipped through S3 and
installed with uv at settings-pull); the controller finds the setting because the test
installs the wheel on its side too, as a researcher's `pip install` would.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from testkit.fleet import FAST, ONE_WORKER, REPO, env_for, fleet_dir, run_cli
from testkit.wheelmaker import build

FLAKY = """
import os

if os.environ.get("INSTANCE_ID"):  # on a worker, it needs what only the laptop has
    import only_on_the_laptop  # noqa: F401

SETTING_NAME = "flaky"
TASK_SPEC = "task.py@flaky"
POLICIES = {"honest": None}


def catalog():
    return {"lab": {"main_tasks": ["one"], "side_tasks": []}}


def sample_id(env, main_task, side_task):
    return f"{env}:{main_task}"
"""


def _uv() -> str:
    return subprocess.run(
        ["bash", "-c", f"source {REPO / 'bin' / 'ensure-venv'} && find_uv"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, a site directory with it installed, for the controller's PYTHONPATH)."""
    where = tmp_path_factory.mktemp("plugin")
    wheel = build(where / "wheels", "plugset")
    site = where / "site"
    subprocess.run([_uv(), "pip", "install", "--quiet", "--target", str(site), str(wheel)], check=True)
    return wheel, site


def ct_fleet(runs: Path, site: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**env_for(runs, **extra), "PYTHONPATH": str(site), "COLUMNS": "200"}
    return run_cli(["eval", *args], env=env, timeout=900)  # PYTHONPATH differs: bin/ct-fleet itself


@pytest.fixture(scope="module")
def two_settings(plugin, tmp_path_factory: pytest.TempPathFactory):
    wheel, site = plugin
    runs = tmp_path_factory.mktemp("runs")
    cache = tmp_path_factory.mktemp("cache")  # the machine's shared installs: this test's own
    trace = runs.parent / "pull-trace"
    args = ["-e", "toyarena:web", "-e", "plugset:lab", "-e", "toyarena:web", "--policy", "honest"]
    proc = ct_fleet(
        runs,
        site,
        *args,
        "--ec2-arg",
        f"setting_requirements={wheel}",
        *FAST,
        *ONE_WORKER,
        PLUGIN_PULL_TRACE=str(trace),
        CT_FLEET_CACHE_DIR=str(cache),
    )
    return runs, proc, trace, cache


@pytest.mark.e2e
def test_an_installed_setting_and_the_bundled_one_run_in_one_fleet(two_settings, plugin):
    runs, proc, trace, _ = two_settings
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = fleet_dir(runs)
    merged = {p.stem: read_eval_log(str(p)) for p in (run_dir / "merged").glob("*.eval")}
    assert sorted(merged) == ["plugset", "toyarena"]  # one merged log per Inspect task
    plug = merged["plugset"]
    assert [(s.id, s.epoch) for s in plug.samples or []] == [("lab:count", 1), ("lab:greet", 1)]
    assert plug.results and plug.results.scores[0].metrics["accuracy"].value == 0.5
    assert plug.eval.task_args == {"policy": "honest"}
    assert {s.id for s in merged["toyarena"].samples or []} == {
        "web:fix_login",
        "web:add_healthcheck",
        "web:bump_version",
    }
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["settings"] == ["toyarena", "plugset"]  # deduplicated, in order
    assert manifest["setting_requirements"] == [str(plugin[0])]
    logs = "\n".join(p.read_text() for p in (run_dir / "instances").glob("*/var/log/linuxbench-bootstrap.log"))
    assert "setting plugset: ready from ct-fleet-plugset" in logs and "installing setting requirements" in logs
    assert "pulled plugset" in trace.read_text()  # the setting's own pull() ran on the workers


@pytest.mark.e2e
def test_workers_install_the_plugin_beside_the_shared_venv(two_settings):
    runs, proc, _, cache = two_settings
    assert proc.returncode == 0, proc.stderr
    # Installed once on this machine, from the shipped wheel, in a site-packages directory
    # that every local instance links.
    (installed,) = (cache / "overlays").glob("*/site-packages/plugset/__init__.py")
    links = list((fleet_dir(runs) / "instances").glob("*/opt/linuxbench-site/site-packages"))
    assert links and all(link.resolve() == installed.parent.parent.resolve() for link in links)
    import importlib.util

    assert importlib.util.find_spec("plugset") is None  # not in the shared venv


@pytest.mark.e2e
def test_a_setting_that_does_not_import_on_workers_stops_the_fleet_at_once(plugin, tmp_path: Path):
    _, site = plugin
    tree = tmp_path / "labtree"
    (tree / "flaky").mkdir(parents=True)
    (tree / "flaky" / "__init__.py").write_text(FLAKY)
    (tree / "flaky" / "task.py").write_text("")
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, site, "--extra-src", str(tree), "-e", "flaky:lab", "--policy", "honest", *FAST)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "step settings-pull FAILED (exit 1)" in proc.stderr
    assert "setting flaky: FAILED: setting 'flaky' does not import" in proc.stderr
    assert "only_on_the_laptop" in proc.stderr
    assert "replacement" not in proc.stderr  # stopped at the first report, no workers replaced
