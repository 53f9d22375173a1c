"""-r/--requirements: the packages a plain task needs, for the controller's probe and every
worker alike. A missing one is refused with the fix named; given with -r (here a wheel in a
requirements file: nothing downloads), the task loads, runs on local workers, and the
requirement is part of the fleet id."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ct_fleet.controller.planning import overlay
from ct_fleet.controller.planning.setting_plan import Requirements
from testkit.fleet import FAST, ONE_WORKER, REPO, env_for, run_cli, stat
from testkit.wheelmaker import write_wheel

WORDS_TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import Generate, TaskState, solver

import numwords_lite  # not in ct-fleet's venv: only -r brings it


@solver
def say():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.output.completion = numwords_lite.words(int(state.input_text))
        return state

    return solve


@task
def words():
    samples = [Sample(id=i, input=str(i), target=w) for i, w in enumerate(["zero", "one"])]
    return Task(dataset=samples, solver=say(), scorer=match())
"""

WORDS_MODULE = 'def words(n):\n    return ["zero", "one"][n]\n'


def ct_fleet(runs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={**env_for(runs), "COLUMNS": "200"}, timeout=600)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "words.py").write_text(WORDS_TASK)
    wheel = write_wheel(tmp_path / "wheels", "numwords-lite", {"numwords_lite/__init__.py": WORDS_MODULE})
    (tmp_path / "requirements.txt").write_text(f"# what words.py needs\n{wheel.relative_to(tmp_path)}\n")
    return project


def test_a_missing_package_is_refused_naming_the_fix(tmp_path: Path, project: Path):
    proc = ct_fleet(tmp_path / "runs", "eval", str(project / "words.py"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "No module named 'numwords_lite'" in proc.stderr
    assert "give it with -r numwords_lite" in proc.stderr
    assert not list((tmp_path / "runs").glob("*/manifest.json"))


def test_pip_options_in_a_requirements_file_are_refused(tmp_path: Path, project: Path):
    (tmp_path / "requirements.txt").write_text("--index-url https://example.invalid/simple\n")
    proc = ct_fleet(tmp_path / "runs", "eval", str(project / "words.py"), "-r", str(tmp_path / "requirements.txt"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert re.search(r"requirements.txt line 1: pip options \(--index-url\) are not supported", proc.stderr)


@pytest.mark.e2e
def test_requirements_load_the_task_here_and_on_local_workers(tmp_path: Path, project: Path):
    runs = tmp_path / "runs"
    proc = ct_fleet(
        runs, "eval", str(project / "words.py"), "-r", str(tmp_path / "requirements.txt"), *FAST, *ONE_WORKER
    )
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match accuracy 1" in out  # each worker ran the package's own code
    assert stat(out, "attempts") == 2
    # The requirement is part of the fleet (its id hashes the wheel), and workers get it from the manifest.
    (manifest,) = runs.glob("*/manifest.json")
    assert any(
        r.endswith("numwords_lite-0.1.0-py3-none-any.whl")
        for r in json.loads(manifest.read_text())["setting_requirements"]
    )


# A uv that records its calls and takes a while (so that two installs overlap), then makes
# the --target directory it was given, holding one package.
SLOW_UV = """#!/bin/sh
echo "$@" >>"$0.calls"
sleep 1
prev=
for arg; do
  if [ "$prev" = --target ]; then mkdir -p "$arg/pkg"; fi
  prev=$arg
done
"""


def test_two_runs_installing_the_same_requirements_share_one_install(tmp_path: Path):
    uv = tmp_path / "uv"
    uv.write_text(SLOW_UV)
    uv.chmod(0o755)
    environ = {"CT_FLEET_CACHE_DIR": str(tmp_path / "cache"), "CT_FLEET_UV": str(uv), "PATH": os.environ["PATH"]}
    reqs = Requirements(["foo[x]>=1"], [])
    root = tmp_path / "cache" / "overlays"
    key = overlay.site_key(reqs.specs, reqs.wheels, sys.prefix, REPO / "requirements.lock")
    (root / f".{key}-killed" / "site-packages").mkdir(parents=True)  # an install killed half-way
    with ThreadPoolExecutor(2) as pool:
        sites = list(pool.map(lambda _: overlay.install(reqs, environ), range(2)))
    # One install, whole, in a site-packages directory (Inspect's test for an installed package).
    assert sites == [root / key / "site-packages"] * 2
    assert (sites[0] / "pkg").is_dir() and (root / key / ".complete").is_file()
    (call,) = (tmp_path / "uv.calls").read_text().splitlines()
    assert re.search(rf"--target {root}/\.{key}-\w+/site-packages .*foo\[x\]>=1$", call)
    assert sorted(p.name for p in root.iterdir()) == [f".{key}.lock", key]  # the killed one's leftovers went
    assert overlay.install(reqs, environ) == sites[0]  # a later run takes it as it is
    assert len((tmp_path / "uv.calls").read_text().splitlines()) == 1
