"""Each task x model of a fleet with its own model and metrics, wherever a fleet is read:
`status`, `fleets`, the results table and `eval --json`, the run report.

Unit tests: a manifest and merged logs (written with Inspect's own writer) in a temp runs
dir, no fleet run.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalError,
    EvalLog,
    EvalMetric,
    EvalResults,
    EvalScore,
    EvalSpec,
    EvalStats,
    write_eval_log,
)
from inspect_ai.model import ModelUsage
from rich.console import Console

from ct_fleet.cli.console import UNBOUNDED
from ct_fleet.cli.display import grid_text, run_status_view, summary_table
from ct_fleet.cli.main import cli
from ct_fleet.controller.reporting import (
    FleetStatus,
    RunResult,
    by_task,
    local_status,
    merged_results,
    read_merged,
    run_summary,
    write_report,
)
from ct_fleet.merge import MergedTask
from ct_fleet.protocol import Manifest, ManifestJob, ManifestTask, run_layout

A, B = "openai-api/local/a", "openai-api/local/b"


def merged_log(
    path: Path,
    task: str,
    model: str,
    scores: list[tuple[str, str | None, dict[str, float]]],
    *,
    total: int = 2,
    completed: int = 2,
    error: str | None = None,
    tokens: int = 30,
) -> Path:
    """A merged log's header as the merge writes one: results, status, model usage."""
    log = EvalLog(
        eval=EvalSpec(
            created="2026-12-06T10:00:00+00:00",
            task=task,
            model=model,
            dataset=EvalDataset(name=task, samples=total, sample_ids=list(range(1, total + 1))),
            config=EvalConfig(epochs=1),
        ),
        status="error" if error else "success",
        error=EvalError(message=error, traceback="", traceback_ansi="") if error else None,
        results=EvalResults(
            total_samples=total,
            completed_samples=completed,
            scores=[
                EvalScore(
                    name=name,
                    scorer=name,
                    reducer=reducer,
                    metrics={m: EvalMetric(name=m, value=v) for m, v in metrics.items()},
                )
                for name, reducer, metrics in scores
            ],
        ),
        stats=EvalStats(model_usage={model: ModelUsage(input_tokens=tokens, total_tokens=tokens)}),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(path))
    return path


def grid_fleet(runs: Path, fleet_id: str = "f0grid", *, policy: str | None = None, created: float = 0.0) -> Path:
    """Tasks sums x (a, b) and squares x a; two samples each. sums x a and sums x b are
    merged (b with an error), squares has no merged log yet."""
    setting = "toyarena" if policy else None
    tasks = [
        ManifestTask(key="k1aaaaaaaa", name="sums", task_spec="t.py@sums", task_args={}, sample_ids=[1, 2], model=A),
        ManifestTask(key="k2bbbbbbbb", name="sums", task_spec="t.py@sums", task_args={}, sample_ids=[1, 2], model=B),
        ManifestTask(
            key="k3cccccccc",
            name="squares",
            task_spec="t.py@squares",
            task_args={},
            sample_ids=[1, 2],
            model=A,
            setting=setting,
        ),
    ]
    jobs = [ManifestJob(job_id=f"{t.key}-{n}", task=t.key, sample_id=n, epoch=1) for t in tasks for n in t.sample_ids]
    manifest = Manifest(
        fleet_id=fleet_id,
        model=A,
        epochs=1,
        code_sha="x",
        tasks=tasks,
        jobs=jobs,
        policy=policy,
        created_at=created,
    )
    run_dir = runs / fleet_id
    run_layout.jobs_dir(run_dir).mkdir(parents=True)
    (run_dir / run_layout.MANIFEST).write_text(manifest.to_json())
    (run_dir / run_layout.MOTO_LOG).touch()
    for job in jobs[:5]:  # squares: one result of two
        run_layout.job_log(run_dir, job.job_id).touch()
    merged = run_dir / run_layout.MERGED
    merged_log(merged / "sums-k1aaaaaa.eval", "sums", A, [("match", None, {"accuracy": 0.75, "stderr": 0.25})])
    merged_log(
        merged / "sums-k2bbbbbb.eval",
        "sums",
        B,
        [("match", None, {"accuracy": 0.5, "stderr": 0.5})],
        completed=1,
        error="1 of 2 samples errored",
    )
    return run_dir


def rendered(renderable: object) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=UNBOUNDED, soft_wrap=True, no_color=True).print(renderable)
    return out.getvalue().splitlines()


BARS = "│┃"  # a table's rows, its header's


def cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(f"[{BARS}]", line.strip().strip(BARS))]


def table_rows(lines: list[str]) -> list[list[str]]:
    return [cells(line) for line in lines if any(bar in line for bar in BARS)]


def row(lines: list[str], *first: str) -> list[str]:
    (found,) = [r for r in table_rows(lines) if r[: len(first)] == list(first)]
    return found


def test_status_shows_each_task_x_model_with_its_own_model_and_merged_metrics(tmp_path: Path) -> None:
    status = local_status(grid_fleet(tmp_path))
    assert status.models == [A, B]
    got = [(t.task, t.model, t.jobs, t.results, t.status, t.metrics) for t in status.tasks]
    assert got == [
        ("sums", A, 2, 2, "success", {"match": {"accuracy": 0.75, "stderr": 0.25}}),
        ("sums", B, 2, 2, "error", {"match": {"accuracy": 0.5, "stderr": 0.5}}),
        ("squares", A, 2, 1, None, None),  # nothing merged yet
    ]
    assert status.tasks[0].log and status.tasks[0].log.endswith("sums-k1aaaaaa.eval")
    assert FleetStatus.model_validate_json(status.model_dump_json()) == status

    lines = rendered(run_status_view(status))
    header = row(lines, "task")
    assert header == ["task", "model", "jobs", "results", "left", "merged", "metrics"]  # no policy: plain tasks
    assert row(lines, "sums", A) == ["sums", A, "2", "2", "0", "success", "match accuracy 0.75, stderr 0.25"]
    assert row(lines, "sums", B) == ["sums", B, "2", "2", "0", "error", "match accuracy 0.5, stderr 0.5"]
    assert row(lines, "squares", A) == ["squares", A, "2", "1", "1", "-", "-"]
    assert "policy" not in row(lines, "jobs")  # the fleet's row no longer passes the model off as a policy


def test_tasks_of_their_own_epochs_show_them_and_the_fleet_their_range(tmp_path: Path) -> None:
    run_dir = grid_fleet(tmp_path)
    path = run_dir / run_layout.MANIFEST
    manifest = Manifest.from_json(path.read_text())
    # As the planner writes it: each task's own where they differ, the most as the fleet's.
    manifest.epochs = 3
    manifest.tasks = [replace(t, epochs=own) for t, own in zip(manifest.tasks, (2, 3, 1), strict=True)]
    path.write_text(manifest.to_json())
    status = local_status(run_dir)
    assert [(t.task, t.model, t.epochs) for t in status.tasks] == [("sums", A, 2), ("sums", B, 3), ("squares", A, 1)]
    assert status.epochs == 3
    assert FleetStatus.model_validate_json(status.model_dump_json()) == status

    lines = rendered(run_status_view(status))
    rows = table_rows(lines)
    fleet_header = rows.index(["jobs", "results", "left", "work", "in flight", "dead", "workers", "epochs"])
    assert rows[fleet_header + 1][-1] == "1-3"
    assert row(lines, "task") == ["task", "model", "epochs", "jobs", "results", "left", "merged", "metrics"]
    assert row(lines, "sums", B)[:4] == ["sums", B, "3", "2"]
    assert row(lines, "squares", A)[:4] == ["squares", A, "1", "2"]


def test_a_setting_run_shows_its_policy_in_a_column_of_its_own(tmp_path: Path) -> None:
    status = local_status(grid_fleet(tmp_path, policy="attack"))
    assert [t.policy for t in status.tasks] == [None, None, "attack"]  # only the setting's task runs under it
    lines = rendered(run_status_view(status))
    assert row(lines, "task") == ["task", "model", "policy", "jobs", "results", "left", "merged", "metrics"]
    assert row(lines, "squares")[:3] == ["squares", A, "attack"]
    assert row(lines, "sums", A)[:3] == ["sums", A, "-"]


def test_merged_logs_are_matched_by_what_they_ran_not_by_their_order(tmp_path: Path) -> None:
    run_dir = grid_fleet(tmp_path)
    manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())
    logs = {Path(r.log).name: r for r in merged_results(run_dir)}
    found = by_task(manifest, list(reversed(logs.values())))
    assert {k: Path(r.log).name for k, r in found.items()} == {
        "k1aaaaaaaa": "sums-k1aaaaaa.eval",
        "k2bbbbbbbb": "sums-k2bbbbbb.eval",
    }
    # Two tasks of one name and model (other arguments): told apart by the key in the file name.
    twin = ManifestTask(
        key="k9zzzzzzzz", name="sums", task_spec="t.py@sums", task_args={"n": 3}, sample_ids=[1], model=A
    )
    manifest.tasks.insert(0, twin)  # first: it would take sums x a's log were the key not read
    twin_log = merged_log(
        run_dir / run_layout.MERGED / "sums-k9zzzzzz.eval", "sums", A, [("match", None, {"accuracy": 0.0})]
    )
    found = by_task(manifest, merged_results(run_dir))
    assert Path(found["k9zzzzzzzz"].log).name == "sums-k9zzzzzz.eval"
    assert Path(found["k1aaaaaaaa"].log).name == "sums-k1aaaaaa.eval"
    # A model's only task left takes its only log left, whatever name the log gives it.
    manifest.tasks.remove(twin)
    twin_log.unlink()
    merged_log(run_dir / run_layout.MERGED / "squares.eval", "renamed", A, [("match", None, {"accuracy": 1.0})])
    assert by_task(manifest, merged_results(run_dir))["k3cccccccc"].task == "renamed"
    # Two logs left for it: neither is shown rather than the wrong one.
    merged_log(run_dir / run_layout.MERGED / "other.eval", "other", A, [("match", None, {"accuracy": 0.5})])
    assert "k3cccccccc" not in by_task(manifest, merged_results(run_dir))


def test_metrics_read_from_a_header_are_keyed_as_the_merge_keys_them(tmp_path: Path) -> None:
    from ct_fleet.merge.results import metrics_table

    scores = [("match", "mean", {"accuracy": 0.5}), ("match", "max", {"accuracy": 1.0}), ("f1", None, {"mean": 0.25})]
    path = merged_log(tmp_path / "x.eval", "sums", A, scores, total=4, completed=3)
    from inspect_ai.log import read_eval_log

    want = metrics_table(read_eval_log(str(path), header_only=True).results)
    got = read_merged(path)
    assert got is not None and got.metrics == want
    assert want == {"match": {"accuracy": 0.5}, "match/max": {"accuracy": 1.0}, "f1": {"mean": 0.25}}
    assert (got.task, got.model, got.samples, got.completed, got.tokens) == ("sums", A, 4, 3, 30)
    assert read_merged(tmp_path / "missing.eval") is None


def _merged_tasks(run_dir: Path) -> list[MergedTask]:
    merged = run_dir / run_layout.MERGED
    return [
        MergedTask(
            path=merged / "sums-k1aaaaaa.eval",
            task="sums",
            status="success",
            samples_expected=2,
            samples_present=2,
            metrics={"match": {"accuracy": 0.75, "stderr": 0.25}},
            model_usage={A: {"total_tokens": 30}},
        ),
        MergedTask(
            path=merged / "sums-k2bbbbbb.eval",
            task="sums",
            status="error",
            samples_expected=2,
            samples_present=2,
            errors=[(2, 1, "boom")],
            metrics={"match": {"accuracy": 0.5, "stderr": 0.5}},
            model_usage={B: {"total_tokens": 30}},
        ),
    ]


def test_the_results_table_and_json_show_each_task_x_model_and_say_completed(tmp_path: Path) -> None:
    merged = _merged_tasks(grid_fleet(tmp_path))
    lines = rendered(summary_table(merged))
    assert row(lines, "task") == [
        "task",
        "model",
        "status",
        "samples",
        "completed",
        "errors",
        "missing",
        "metrics",
        "tokens",
    ]
    assert row(lines, "sums", A) == [
        "sums",
        A,
        "success",
        "2/2",
        "2",
        "0",
        "0",
        "match accuracy 0.75, stderr 0.25",
        "30",
    ]
    assert row(lines, "sums", B) == ["sums", B, "error", "2/2", "1", "1", "0", "match accuracy 0.5, stderr 0.5", "30"]

    summary = run_summary(
        RunResult(fleet_id="f0grid", run_dir=tmp_path, merged=merged, jobs=4, resumed=0, workers_launched=1, elapsed=1)
    )
    got = [(t.task, t.model, t.completed, t.errors, t.metrics["match"]["accuracy"]) for t in summary.tasks]
    assert got == [("sums", A, 2, 0, 0.75), ("sums", B, 1, 1, 0.5)]
    assert [t.successes for t in summary.tasks] == [2, 1]  # its former name, for older scripts: the same number


def test_the_run_report_has_a_results_section_per_task_x_model(tmp_path: Path) -> None:
    run_dir = grid_fleet(tmp_path)
    (run_dir / run_layout.ATTEMPTS).write_text("")
    page = write_report(run_dir)
    data = json.loads((run_dir / run_layout.REPORT_JSON).read_text())
    got = [(r["task"], r["model"], r["status"], r["completed"], r["samples"], r["metrics"]) for r in data["results"]]
    assert got == [
        ("sums", A, "success", 2, 2, {"match": {"accuracy": 0.75, "stderr": 0.25}}),
        ("sums", B, "error", 1, 2, {"match": {"accuracy": 0.5, "stderr": 0.5}}),
        ("squares", A, None, 0, 0, {}),
    ]
    html = page.read_text()
    section = html[html.index("<h2>Results</h2>") : html.index("<h2>Workers x time</h2>")]
    # Several models: a grid of tasks x models first, each cell its metrics.
    assert f"<tr><th>task</th><th>{A}</th><th>{B}</th></tr>" in section
    assert "<tr><td>sums</td><td>match accuracy 0.75, stderr 0.25</td><td>match accuracy 0.5, stderr 0.5</td></tr>" in (
        section
    )
    assert "<tr><td>squares</td><td>no results</td><td>-</td></tr>" in section
    # Then a table per task x model: a row per scorer, a column per metric.
    headings = re.findall(r"<h3>(.*?)</h3>", section)
    assert headings == [f"sums \u00b7 {A}", f"sums \u00b7 {B}", f"squares \u00b7 {A}"]
    assert (
        '<tr><th>scorer</th><th>accuracy</th><th>stderr</th></tr><tr><td>match</td><td class="n">0.75</td>' in section
    )
    assert "1 of 2 samples errored" in section and "no result merged" in section


def test_tasks_x_models_in_a_few_words() -> None:
    assert grid_text([("a", "m1"), ("a", "m2"), ("b", "m1"), ("b", "m2")]) == "a, b x m1, m2"
    assert grid_text([("a", "m1"), ("a", "m2"), ("b", "m1")]) == "a x m1, m2; b x m1"
    assert grid_text([("a", "m1")]) == "a x m1" and grid_text([]) == "-"


def test_fleets_lists_this_machine_s_fleets_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    grid_fleet(runs, "f0old", created=1_700_000_000.0)
    ec2 = grid_fleet(runs, "f1new", created=1_800_000_000.0)
    (ec2 / run_layout.MOTO_LOG).unlink()  # no embedded AWS's log: a fleet of EC2, run from here
    (runs / "crashes").mkdir()  # not a fleet
    (runs / "f2old").mkdir()
    (runs / "f2old" / run_layout.MANIFEST).write_text('{"schema": 2}')
    monkeypatch.setenv("CT_FLEET_RUNS", str(runs))

    result = CliRunner().invoke(cli, ["fleets"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert row(lines, "fleet") == ["fleet", "created", "cloud", "state", "jobs", "tasks x models"]
    fleets = [r for r in table_rows(lines) if r[0] != "fleet"]
    assert [(f[0], f[2], f[3], f[4], f[5]) for f in fleets] == [
        ("f1new", "ec2", "incomplete", "5/6", f"sums x {A}, {B}; squares x {A}"),
        ("f0old", "embedded", "incomplete", "5/6", f"sums x {A}, {B}; squares x {A}"),
    ]
    assert "f2old" in result.stderr and "schema" in result.stderr  # said, and left out

    as_json = CliRunner().invoke(cli, ["fleets", "--json"])
    assert as_json.exit_code == 0, as_json.output
    listed = [FleetStatus.model_validate(f) for f in json.loads(as_json.stdout)]
    assert [(f.fleet_id, f.created_at, f.cloud) for f in listed] == [
        ("f1new", 1_800_000_000.0, "ec2"),
        ("f0old", 1_700_000_000.0, "embedded"),
    ]
    assert [(t.task, t.model, t.status) for t in listed[0].tasks] == [
        ("sums", A, "success"),
        ("sums", B, "error"),
        ("squares", A, None),
    ]

    monkeypatch.setenv("CT_FLEET_RUNS", str(tmp_path / "none"))
    empty = CliRunner().invoke(cli, ["fleets"])
    assert empty.exit_code == 0 and "no fleets in" in empty.stdout
    assert json.loads(CliRunner().invoke(cli, ["fleets", "--json"]).stdout) == []
