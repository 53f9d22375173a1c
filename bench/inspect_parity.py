"""`inspect eval` command lines from Inspect's documentation, run direct and on the local
fleet, and each merged log compared with the direct run's log of the same task x model.

    .venv/bin/python bench/inspect_parity.py [--only N ...]

Offline: the tasks are small datasets written here, the model is a loopback
OpenAI-compatible server (tests/testkit/openai_stub.py: "What is A times B?" -> A*B). Compared per
task x model: status, samples (id, epoch, scores, completion, error), metrics, eval config,
generate config, solver and its args, task args, model roles, tags, metadata. Prints one
row per command line; exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-parity"
M1, M2, JUDGE = "openai-api/stubai/alpha", "openai-api/stubai/beta", "openai-api/stubai/judge"

TASKS = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import match, includes
from inspect_ai.solver import generate, system_message


def _times(k, n):
    return MemoryDataset([Sample(id=i, input=f"What is {i} times {k}?", target=str(i * k)) for i in range(1, n + 1)])


@task
def arith(level: int = 1, n: int = 6):
    return Task(dataset=_times(level + 6, n), solver=[system_message("Answer with a number."), generate()], scorer=match())


@task
def products(n: int = 4):
    return Task(dataset=_times(3, n), solver=generate(), scorer=includes())
"""

SOLVERS = """
from inspect_ai.model import get_model
from inspect_ai.solver import solver


@solver
def checked(style: str = "plain", fail_id: int = 0):
    async def solve(state, generate):
        if state.sample_id == fail_id:
            raise RuntimeError("fails on purpose")
        state = await generate(state)
        state.metadata["style"] = style
        if "grader" in state.metadata.get("roles", "grader"):
            state.metadata["grader"] = (await get_model(role="grader").generate("What is 2 times 2?")).completion
        return state

    return solve
"""

# (what Inspect's docs show, the command line adapted to this project)
COMMANDS: list[tuple[str, str]] = [
    ("a task on a model", f"arith.py --model {M1}"),
    ("--limit", f"arith.py --model {M1} --limit 3"),
    ("generate config", f"arith.py --model {M1} --temperature 0.7 --max-tokens 256 --seed 42 --top-p 0.9"),
    ("epochs and reducer", f"arith.py --model {M1} --epochs 3 --epochs-reducer mode"),
    ("task args", f"arith.py --model {M1} -T level=2 -T n=4"),
    ("several models", f"arith.py --model {M1},{M2}"),
    ("several tasks", f"arith.py@arith arith.py@products --model {M1}"),
    ("limits", f"arith.py --model {M1} --message-limit 10 --token-limit 5000 --time-limit 60"),
    ("--sample-id", f"arith.py --model {M1} --sample-id 1,3,5"),
    ("solver with -S", f"arith.py --model {M1} --solver solvers.py@checked -S style=brief"),
    ("model role", f"arith.py --model {M1} --solver solvers.py@checked --model-role grader={JUDGE}"),
    ("fail-on-error", f"arith.py --model {M1} --solver solvers.py@checked -S fail_id=2 --fail-on-error 0.5"),
    ("tags, metadata", f"arith.py --model {M1} --tags smoke,nightly --metadata owner=me --metadata run=7"),
    ("--generate-config", f"arith.py --model {M1} --generate-config gen.yaml"),
    ("--task-config", f"arith.py --model {M1} --task-config task.yaml"),
    ("retry and score on error", f"arith.py --model {M1} --retry-on-error 2 --score-on-error --max-retries 3"),
]


def _stub(where: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "testkit" / "openai_stub.py"),
            "--port-file",
            str(where / "port"),
            "--log",
            str(where / "log"),
        ],
        env={**os.environ, "STUB_API_KEY": KEY},
    )
    deadline = time.monotonic() + 30
    while not (where / "port").exists() or not (where / "port").read_text():
        if time.monotonic() > deadline:
            raise RuntimeError("the model stub did not start")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{(where / 'port').read_text()}/v1"


def _logs(directory: Path) -> dict[tuple[str, str], Any]:
    from inspect_ai.log import read_eval_log

    return {(log.eval.task, log.eval.model): log for log in (read_eval_log(str(p)) for p in directory.glob("*.eval"))}


def _dump(value: Any) -> Any:
    return value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value


def _view(log: Any) -> dict[str, Any]:
    ev = log.eval
    return {
        "status": log.status,
        "samples": sorted(
            (
                str(s.id),
                s.epoch,
                json.dumps({k: v.value for k, v in (s.scores or {}).items()}, sort_keys=True),
                s.output.completion if s.output else None,
                bool(s.error),
            )
            for s in log.samples or []
        ),
        "metrics": _dump(log.results.scores) if log.results else None,
        "config": _dump(ev.config),
        "generate config": _dump(ev.model_generate_config),
        "solver": (ev.solver.rsplit("/", 1)[-1] if ev.solver else None, ev.solver_args),
        "task args": ev.task_args,
        "model roles": {k: v.model for k, v in (ev.model_roles or {}).items()},
        "tags": sorted(ev.tags or []),
        "metadata": ev.metadata,
    }


def compare(direct: Path, fleet: Path) -> list[str]:
    want, got = _logs(direct), _logs(fleet)
    if sorted(want) != sorted(got):
        return [f"logs: direct {sorted(want)} fleet {sorted(got)}"]
    diffs = []
    for pair in sorted(want):
        a, b = _view(want[pair]), _view(got[pair])
        diffs += [f"{pair[0]} x {pair[1]}: {k}" for k in a if a[k] != b[k]]
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", type=int, nargs="*", help="run only these command numbers (1-based)")
    args = parser.parse_args()
    table = Table(title="inspect eval vs ct-fleet eval, per task x model")
    for column in ("#", "what", "command line", "logs", "direct s", "fleet s", "same"):
        table.add_column(column)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ct-parity-") as tmp:
        root = Path(tmp)
        stub, base_url = _stub(root)
        project = root / "project"  # the tasks' directory ships: logs and runs stay out of it
        project.mkdir()
        try:
            (project / "arith.py").write_text(TASKS)
            (project / "solvers.py").write_text(SOLVERS)
            (project / "gen.yaml").write_text("temperature: 0.2\nmax_tokens: 100\nseed: 3\n")
            (project / "task.yaml").write_text("level: 3\nn: 5\n")
            secrets = {"STUBAI_API_KEY": KEY, "STUBAI_BASE_URL": base_url}
            env = {k: v for k, v in os.environ.items() if not k.startswith("INSPECT_")}
            inspect = Path(sys.executable).with_name("inspect")
            for number, (what, line) in enumerate(COMMANDS, start=1):
                if args.only and number not in args.only:
                    continue
                words = shlex.split(line)
                direct_dir, fleet_dir, runs = root / f"d{number}", root / f"f{number}", root / f"runs{number}"
                runs.mkdir()
                (runs / ".env").write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
                started = time.monotonic()
                direct = subprocess.run(
                    [str(inspect), "eval", *words, "--log-dir", str(direct_dir), "--display", "none"],
                    cwd=project,
                    env={**env, **secrets},
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                direct_s = time.monotonic() - started
                started = time.monotonic()
                fleet = subprocess.run(
                    [
                        str(REPO / "bin" / "ct-fleet"),
                        "eval",
                        *words,
                        "--log-dir",
                        str(fleet_dir),
                        "--ec2-arg",
                        "idle_timeout=5",
                    ],
                    cwd=project,
                    env={**env, "CT_FLEET_RUNS": str(runs), "CT_FLEET_DOTENV": str(runs / ".env")},
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                fleet_s = time.monotonic() - started
                if direct.returncode != 0 or fleet.returncode != 0:
                    diffs = [
                        f"exit direct {direct.returncode} fleet {fleet.returncode}: {(fleet.stderr or direct.stderr)[-300:]}"
                    ]
                else:
                    diffs = compare(direct_dir, fleet_dir)
                failed += bool(diffs)
                table.add_row(
                    str(number),
                    what,
                    f"inspect eval {line}",
                    str(len(_logs(direct_dir)) if direct_dir.exists() else 0),
                    f"{direct_s:.1f}",
                    f"{fleet_s:.1f}",
                    "yes" if not diffs else "; ".join(diffs)[:300],
                )
        finally:
            stub.terminate()
            stub.wait(timeout=10)
    Console(width=250).print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
