"""Where a setting may come from: the examples, an --extra-src root, a `ct_fleet.settings`
entry point of an installed distribution; nothing else, however importable."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from ct_fleet.errors import BadInput
from ct_fleet.settings import SettingSources, find_setting

SETTING = """
SETTING_NAME = "{name}"
TASK_SPEC = "task.py@{name}"
POLICIES = {{"honest": None}}


def catalog():
    return {{"lab": {{"main_tasks": ["one"], "side_tasks": []}}}}


def sample_id(env, main_task, side_task):
    return 7
"""


def _package(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(SETTING.format(name=name))
    return root / name


def test_examples_and_extra_src_roots(tmp_path: Path):
    examples = find_setting("toyarena")
    assert examples.source == "examples" and examples.catalog()
    _package(tmp_path / "tree", "treelab_u1")
    found = find_setting("treelab_u1", SettingSources(extra_roots=(tmp_path / "tree",)))
    assert found.source == "extra-src tree" and found.sample_id("lab", "one", None) == 7  # ints stay ints
    assert found.package_dir == (tmp_path / "tree" / "treelab_u1").resolve()


def test_an_installed_distribution_s_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    site = tmp_path / "site"
    _package(site, "distlab_u1")
    info = site / "ct_fleet_distlab-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ct-fleet-distlab\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ct_fleet.settings]\ndistlab_u1 = distlab_u1\n")
    monkeypatch.syspath_prepend(str(site))
    found = find_setting("distlab_u1", SettingSources(examples=None))
    assert (found.source, found.distribution) == ("ct-fleet-distlab", "ct-fleet-distlab")


@pytest.mark.parametrize("name", ["os", "json", "pytest", "nosuch_setting_u1"])
def test_an_importable_module_is_not_a_setting(name: str):
    if name != "nosuch_setting_u1":
        importlib.import_module(name)  # importable here, which is not enough
    with pytest.raises(BadInput, match=f"setting '{name}' found in no source"):
        find_setting(name)


def test_a_setting_that_fails_to_import_says_why(tmp_path: Path):
    (tmp_path / "tree" / "brokenlab_u1").mkdir(parents=True)
    (tmp_path / "tree" / "brokenlab_u1" / "__init__.py").write_text("import not_installed_anywhere_u1\n")
    with pytest.raises(BadInput, match="setting 'brokenlab_u1' does not import: ModuleNotFoundError"):
        find_setting("brokenlab_u1", SettingSources(extra_roots=(tmp_path / "tree",)))
    with pytest.raises(BadInput, match="named like a Python module"):
        find_setting("not-a-name")
