"""Build the wheel of a small setting plugin, offline: a distribution `ct-fleet-NAME` whose
package NAME declares itself in the `ct_fleet.settings` entry-point group.

    python tests/testkit/wheelmaker.py OUT_DIR NAME     (prints the wheel's path)

The setting has one environment, `lab`, with main tasks `count` and `greet`, the policy
`honest`, an Inspect task `task.py@NAME` (scores from the sample id, no model call) and a
pull() hook that appends to $PLUGIN_PULL_TRACE when it is set. A wheel is a zip with a
dist-info directory; writing one by hand needs no build backend and no network.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

VERSION = "0.1.0"

INIT = '''"""{name}: a setting shipped as an installed distribution (entry point ct_fleet.settings)."""

import os

SETTING_NAME = "{name}"
TASK_SPEC = "task.py@{name}"


def catalog():
    return {{"lab": {{"main_tasks": ["count", "greet"], "side_tasks": []}}}}


def sample_id(env, main_task, side_task):
    return f"{{env}}:{{main_task}}"


def _honest():
    from .policies import honest

    return honest()


POLICIES = {{"honest": _honest}}


def pull():
    trace = os.environ.get("PLUGIN_PULL_TRACE")
    if trace:
        with open(trace, "a") as fh:
            fh.write("pulled {name}\\n")
'''

POLICIES = """from inspect_ai.model import ModelOutput
from inspect_ai.solver import Generate, Solver, TaskState, solver


@solver
def honest() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.output = ModelOutput.from_content("scripted", "done" if state.sample_id.endswith("count") else "nope")
        return state

    return solve
"""

TASK = """from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes

from {name} import POLICIES, catalog, sample_id


@task
def {name}(policy: str = "honest") -> Task:
    samples = [
        Sample(id=sample_id(env, main, None), input=f"do {{main}} in {{env}}", target="done")
        for env, entry in catalog().items()
        for main in entry["main_tasks"]
    ]
    return Task(dataset=MemoryDataset(samples, name="{name}"), solver=POLICIES[policy](), scorer=includes())
"""


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(out_dir: Path, name: str) -> Path:
    files = {
        f"{name}/__init__.py": INIT.format(name=name),
        f"{name}/policies.py": POLICIES,
        f"{name}/task.py": TASK.format(name=name),
    }
    return write_wheel(out_dir, f"ct-fleet-{name}", files, f"[ct_fleet.settings]\n{name} = {name}\n")


def write_wheel(out_dir: Path, project: str, files: dict[str, str], entry_points: str = "") -> Path:
    """A pure-Python wheel of PROJECT holding FILES (path -> text), with ENTRY_POINTS (the
    entry_points.txt text) when given."""
    dist = project.replace("-", "_")
    info = f"{dist}-{VERSION}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {VERSION}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ct-fleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points
    record = [f"{path},sha256={_digest(text.encode())},{len(text.encode())}" for path, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{dist}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), sys.argv[2]))
