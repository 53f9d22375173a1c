"""A researcher's own Inspect task, written outside the repo, run on the local fleet.

`bin/ct-fleet eval /elsewhere/arith.py@arith -T n=8 -T offset=2 --limit 6 --epochs 2`: the
file ships to workers as an import root of its own; the merged log must read like a
direct `inspect_ai.eval` of the same selection (metrics, sample ids with their types,
epochs, task args) and merging the same results again must give the same ids and order.
Naming the directory instead (`bin/ct-fleet eval /elsewhere`) is the same fleet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import list_eval_logs, read_eval_log

from ct_fleet.controller.fleet import merging as fleet_merge
from ct_fleet.protocol import Manifest, run_layout
from testkit.fleet import FAST, ONE_WORKER, REPO, env_for, fleet_dir, run_cli

TASK_SOURCE = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, Solver, TaskState, solver

from helpers import answer  # a module beside the task: it must ship too


@solver
def adder(offset: int) -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.output = ModelOutput.from_content("adder", answer(int(state.sample_id), offset))
        return state

    return solve


@task
def arith(n: int = 8, offset: int = 0):
    samples = [Sample(id=i, input=f"What is {i} + {offset}?", target=str(i + offset)) for i in range(1, n + 1)]
    return Task(dataset=MemoryDataset(samples, name="arith"), solver=adder(offset), scorer=includes())
"""

HELPERS_SOURCE = """
def answer(n: int, offset: int) -> str:
    # Wrong on multiples of 3: mixed, deterministic scores.
    return str(n + offset + (1 if n % 3 == 0 else 0))
"""


def ct_fleet(runs: Path, *args: str, timeout: int = 600):
    return run_cli(args, env=env_for(runs), timeout=timeout)


@pytest.fixture(scope="module")
def own_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("elsewhere") / "myevals"
    project.mkdir()
    (project / "arith.py").write_text(TASK_SOURCE)
    (project / "helpers.py").write_text(HELPERS_SOURCE)
    return project / "arith.py"


@pytest.fixture(scope="module")
def fleet_run(own_task: Path, tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("runs")
    args = [
        "eval",
        f"{own_task}@arith",
        "-T",
        "n=8",
        "-T",
        "offset=2",
        "--limit",
        "6",
        "--epochs",
        "2",
        *FAST,
        *ONE_WORKER,
    ]
    return runs, ct_fleet(runs, *args)


@pytest.fixture(scope="module")
def rerun(fleet_run, own_task: Path):
    """The same run again, for scripts (--json), naming the task's directory as `inspect eval
    DIR` takes it: its one task file is found, the same fleet resumes, nothing runs."""
    runs, _ = fleet_run
    args = [str(own_task.parent), "-T", "n=8", "-T", "offset=2", "--limit", "6", "--epochs", "2", "--json"]
    return ct_fleet(runs, "eval", *args)


@pytest.fixture(scope="module")
def direct_log(own_task: Path, tmp_path_factory: pytest.TempPathFactory):
    import sys

    sys.path.insert(0, str(own_task.parent))
    # No model, as the fleet is given none: Inspect's own default (none/none) for both.
    (log,) = inspect_eval(
        f"{own_task}@arith",
        task_args={"n": 8, "offset": 2},
        limit=6,
        epochs=2,
        log_dir=str(tmp_path_factory.mktemp("direct")),
        display="none",
    )
    return log


def _merged(runs: Path):
    (path,) = (fleet_dir(runs) / "merged").glob("*.eval")
    return path, read_eval_log(str(path))


@pytest.mark.e2e
def test_own_task_merges_like_a_direct_run(fleet_run, direct_log):
    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, fleet_log = _merged(runs)
    assert fleet_log.status == "success"
    ev, want = fleet_log.eval, direct_log.eval
    assert (ev.task, ev.task_args, ev.model, ev.config.epochs) == ("arith", {"n": 8, "offset": 2}, "none/none", 2)
    assert (ev.task, ev.task_args, ev.model, ev.config.epochs) == (want.task, want.task_args, want.model, 2)
    assert ev.dataset.sample_ids == want.dataset.sample_ids == [1, 2, 3, 4, 5, 6]
    assert ev.config.limit == want.config.limit == 6
    assert ev.config.time_limit is None  # nobody set one (the fleet's kill timeout is not Inspect's)
    assert ev.revision is None  # the task's tree is in no git repo; ct-fleet's own commit is not its revision
    pairs = [(s.id, s.epoch) for s in fleet_log.samples or []]
    assert pairs == [(s.id, s.epoch) for s in direct_log.samples or []]
    assert all(type(s.id) is int for s in fleet_log.samples or [])
    assert fleet_log.results and direct_log.results
    assert fleet_log.results.total_samples == direct_log.results.total_samples == 12
    got = {(s.name, m): v.value for s in fleet_log.results.scores for m, v in s.metrics.items()}
    want_metrics = {(s.name, m): v.value for s in direct_log.results.scores for m, v in s.metrics.items()}
    assert got.keys() == want_metrics.keys() and got
    for key, value in want_metrics.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    assert 0 < got[("includes", "accuracy")] < 1  # the scores are mixed: the comparison means something


@pytest.mark.e2e
def test_merging_again_gives_the_same_ids_and_order(fleet_run, tmp_path: Path):
    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    run_dir = fleet_dir(runs)
    _, first = _merged(runs)
    manifest = Manifest.from_json((run_dir / "manifest.json").read_text())
    (again,) = fleet_merge.merge_fleet(manifest, run_dir, tmp_path / "again")
    second = read_eval_log(str(again.path))
    assert [(s.id, s.epoch) for s in second.samples or []] == [(s.id, s.epoch) for s in first.samples or []]
    assert second.eval.dataset.sample_ids == first.eval.dataset.sample_ids
    assert (second.eval.eval_id, second.eval.run_id) == (first.eval.eval_id, first.eval.run_id)
    merged = ct_fleet(runs, "merge", str(run_dir), "-o", str(tmp_path / "cli"))
    assert merged.returncode == 0, merged.stdout + merged.stderr
    (cli_path,) = (tmp_path / "cli").glob("*.eval")
    assert read_eval_log(str(cli_path)).eval.dataset.sample_ids == [1, 2, 3, 4, 5, 6]


@pytest.mark.e2e
def test_the_viewer_lists_only_the_merged_run(fleet_run):
    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    run_dir = fleet_dir(runs)
    assert len(run_layout.job_logs(run_dir)) == 12
    listed = [Path(info.name.removeprefix("file://")) for info in list_eval_logs(str(run_dir))]
    assert listed == [next((run_dir / "merged").glob("*.eval"))]


@pytest.mark.e2e
def test_the_task_shipped_as_its_own_tree_and_resumes(fleet_run, rerun):
    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((fleet_dir(runs) / "manifest.json").read_text())
    (task,) = manifest["tasks"]
    assert (task["task_root"], task["task_spec"]) == ("extra", "myevals/arith.py@arith")
    assert task["sample_ids"] == [1, 2, 3, 4, 5, 6] and task["task_args"] == {"n": 8, "offset": 2}
    assert [k.split("/")[-1].rsplit("-", 1)[0] for k in manifest["extra_src"]] == ["extra-myevals"]
    assert rerun.returncode == 0, rerun.stderr
    assert "12 jobs (12 already done), 0 workers" in " ".join(rerun.stderr.split())


@pytest.mark.e2e
def test_merge_exits_non_zero_when_a_sample_is_missing(fleet_run, tmp_path: Path):
    import shutil

    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "fleet"
    shutil.copytree(fleet_dir(runs), copy, ignore=shutil.ignore_patterns("instances", "merged"))
    run_layout.job_logs(copy)[0].unlink()
    merged = ct_fleet(runs, "merge", str(copy))
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "status error" in merged.stderr and "1 of 12 samples missing" in merged.stderr


# A command job: another eval CLI (here `inspect eval` itself) given the job's task, sample
# and model in the task's own terms; its one-epoch log becomes the job's epoch.
COMMAND = (
    'd=$(mktemp -d) && inspect eval "$CT_TASK" -T n=8 -T offset=2 --sample-id "$CT_SAMPLE_ID" '
    '--model "$CT_MODEL" --log-dir "$d" --log-format eval --display none && mv "$d"/*.eval "$CT_OUTPUT"'
)


@pytest.mark.e2e
def test_command_jobs_run_the_task_in_its_own_terms(own_task: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    # Two samples, one scored right and one wrong (3 is a multiple of 3): each job a cold
    # `inspect eval` process, the costliest kind of job there is, so one epoch.
    args = [f"{own_task}@arith", "-T", "n=8", "-T", "offset=2", "--sample-id", "2,3"]
    proc = ct_fleet(runs, "eval", *args, "--command", COMMAND, *FAST, *ONE_WORKER)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, log = _merged(runs)
    assert log.status == "success" and log.eval.dataset.sample_ids == [2, 3]
    assert [(s.id, s.epoch) for s in log.samples or []] == [(2, 1), (3, 1)]
    assert log.results and log.results.scores[0].metrics["accuracy"].value == pytest.approx(1 / 2)


@pytest.mark.e2e
def test_a_piped_run_prints_whole_lines(fleet_run):
    """Output to a pipe (CI, nohup, tee) is never folded at 80 columns: each line is whole."""
    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    progress = [line for line in lines if line.startswith("progress: ")]
    # Each line is whole: it ends after its elapsed time, or after the limit the fleet is at.
    assert progress and all(re.search(r" elapsed(, [^;]+)?(; [a-z ]+: .+)*$", line) for line in progress), progress
    merged_path, _ = _merged(runs)
    assert f"merged: {merged_path}" in lines  # the caption, longer than any terminal, on one line
    (row,) = [line for line in lines if line.startswith("│ arith ")]
    assert "success" in row and "12/12" in row and "includes accuracy" in row
    assert "\x1b[" not in proc.stdout  # no colour codes in a file


@pytest.mark.e2e
def test_json_prints_the_outcome_for_scripts(fleet_run, rerun):
    from ct_fleet.controller.reporting import RunSummary

    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    again = rerun
    assert again.returncode == 0, again.stderr
    summary = RunSummary.model_validate_json(again.stdout)  # stdout holds the JSON and nothing else
    assert (summary.schema_version, summary.outcome, summary.exit_status, summary.problems) == (1, "success", 0, [])
    assert (summary.jobs, summary.already_done, summary.enqueued) == (12, 12, 0)
    assert summary.run_dir == str(fleet_dir(runs)) and summary.fleet_id in fleet_dir(runs).name
    (task,) = summary.tasks
    path, log = _merged(runs)
    assert (task.task, task.status, task.log) == ("arith", "success", str(path))
    assert (task.samples_expected, task.samples_present, task.missing, task.errors) == (12, 12, 0, 0)
    assert (task.model, task.completed, task.successes) == (log.eval.model, 12, 12)
    assert log.results is not None
    want = {s.name: {m: v.value for m, v in s.metrics.items()} for s in log.results.scores}
    assert task.metrics == want and want
    assert "results" in again.stderr and "12 jobs (12 already done)" in " ".join(again.stderr.split())


@pytest.mark.e2e
def test_status_of_a_local_fleet_reads_its_run_dir(fleet_run):
    from ct_fleet.controller.reporting import FleetStatus

    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    run_dir = fleet_dir(runs)
    got = ct_fleet(runs, "status", run_dir.name, "--json")  # the embedded cloud is gone: no AWS here
    assert got.returncode == 0, got.stderr
    status = FleetStatus.model_validate_json(got.stdout)
    assert (status.source, status.state, status.jobs, status.results, status.left) == ("local", "complete", 12, 12, 0)
    assert [(t.task, t.jobs, t.results) for t in status.tasks] == [("arith", 12, 12)]
    assert status.merged == [str(_merged(runs)[0])]
    # Its model, and its merged log's metrics: the log read by what it ran, not by its name.
    path, log = _merged(runs)
    (task,) = status.tasks
    assert log.results is not None
    want = {s.name: {m: v.value for m, v in s.metrics.items()} for s in log.results.scores}
    assert (task.model, task.status, task.log, task.metrics) == (log.eval.model, "success", str(path), want)
    listed = ct_fleet(runs, "fleets", "--json")  # this machine's fleets: this one
    assert listed.returncode == 0, listed.stderr
    assert [FleetStatus.model_validate(f) for f in json.loads(listed.stdout)] == [status]
    table = ct_fleet(runs, "status", run_dir.name)
    assert table.returncode == 0 and f"fleet {run_dir.name} (complete, from local)" in table.stdout, table.stderr
    bad = ct_fleet(runs, "status", "../" + run_dir.name)
    assert bad.returncode == 2 and "is not a fleet id" in bad.stderr


@pytest.mark.e2e
def test_view_serves_the_merged_run_and_merges_what_is_missing(fleet_run, tmp_path: Path):
    import shutil
    import socket
    import subprocess
    import urllib.request

    from testkit.fleet import wait_for

    runs, proc = fleet_run
    assert proc.returncode == 0, proc.stderr
    run_dir = fleet_dir(runs)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [str(REPO / "bin" / "ct-fleet"), "view", run_dir.name, "--port", str(port)],
        cwd=REPO,
        env=env_for(runs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listing() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/log-files", timeout=5) as answer:
                return answer.read().decode()
        except OSError:
            assert server.poll() is None, "ct-fleet view exited"
            return ""

    try:
        assert _merged(runs)[0].name in wait_for(listing, timeout=120)  # Inspect's own view API lists it
    finally:
        server.terminate()
        server.wait(timeout=30)
    copy = tmp_path / "runs"
    shutil.copytree(run_dir, copy / run_dir.name, ignore=shutil.ignore_patterns("instances", "merged"))
    again = ct_fleet(copy, "view", run_dir.name, "--no-serve")
    assert again.returncode == 0, again.stderr
    (path,) = again.stdout.split()
    assert read_eval_log(path).results.total_samples == 12  # type: ignore[union-attr]
    for job in (copy / run_dir.name / "jobs").glob("*.evaljob"):
        job.unlink()
    shutil.rmtree(copy / run_dir.name / "merged")
    empty = ct_fleet(copy, "view", run_dir.name, "--no-serve")
    assert empty.returncode == 2 and "has no results yet" in empty.stderr
