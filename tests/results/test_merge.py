"""Merging one-sample .eval logs (ct_fleet.merge) against real Inspect runs.

A tiny deterministic task (mockllm, a solver that needs no model, two scorers whose
values depend on the sample) is run once per test session: directly with epochs=3, and
once per (sample, epoch) with epochs=1 and sample_id=[id], the way fleet workers run
jobs. Tests copy those logs, relabel epochs and merge them.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from inspect_ai.log import (
    EvalLog,
    read_eval_log,
    read_eval_log_sample_summaries,
    read_eval_log_samples,
)

from ct_fleet.evallog import zipio as evalzip  # also teaches zipfile to read zstd entries
from ct_fleet.evallog.relabel import add_prior_time, relabel_epoch
from ct_fleet.merge import MergedTask, Merger, merge_dir, merge_eval_logs
from ct_fleet.merge.spool import Spool

IDS = [1, 2, 3, 4, 5]
EPOCHS = 3
BOOM_ID = 3
BOOM_ENV = "CT_FLEET_MERGE_BOOM"

TASK_SOURCE = f'''
import os

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, mean, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver

CORRECT_IDS = {{1, 2, 4}}


@solver
def echo():
    async def solve(state: TaskState, generate: Generate):
        if os.environ.get("{BOOM_ENV}") == str(state.sample_id):
            raise RuntimeError(f"boom {{state.sample_id}}")
        state.output.completion = state.input_text
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def verdict():
    async def score(state: TaskState, target: Target):
        ok = state.sample_id in CORRECT_IDS
        return Score(value=CORRECT if ok else INCORRECT, answer=state.output.completion)

    return score


@scorer(metrics=[mean(), stderr()])
def size():
    async def score(state: TaskState, target: Target):
        return Score(value=int(state.sample_id) ** 2 / 7)

    return score


@task
def merge_task(variant: int = 0):
    return Task(
        dataset=MemoryDataset([Sample(id=i, input=f"q{{i}}", target="x") for i in {IDS!r}]),
        solver=echo(),
        scorer=[verdict(), size()],
    )
'''


@dataclass
class Logs:
    direct: Path  # epochs=3, all samples
    jobs: dict[tuple[int, int], Path]  # (id, epoch) -> one-sample run (epoch 1 inside)
    boom_job: Path  # (BOOM_ID, 1) with the solver raising
    boom_direct: Path  # epochs=1, all samples, BOOM_ID raising, fail_on_error=False
    variant_job: Path  # sample 1 with task arg variant=1 (another task identity)


GENERATE_SOURCE = f"""
import json, os, sys
from inspect_ai import eval

def run(log_dir, **kw):
    log = eval("merge_task.py@merge_task", model="mockllm/model", log_dir=log_dir,
               display="none", **kw)[0]
    return os.path.abspath(log.location)

out = {{}}
out["direct"] = run("direct", epochs={EPOCHS})
out["jobs"] = [
    [sid, epoch, run(f"jobs/{{sid}}_{{epoch}}", epochs=1, sample_id=[sid])]
    for epoch in range(1, {EPOCHS} + 1)
    for sid in {IDS!r}
]
out["variant_job"] = run("variant", epochs=1, sample_id=[1], task_args={{"variant": 1}})
os.environ["{BOOM_ENV}"] = "{BOOM_ID}"
out["boom_job"] = run("boom_job", epochs=1, sample_id=[{BOOM_ID}])
out["boom_direct"] = run("boom_direct", epochs=1, fail_on_error=False)
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Logs:
    """Run the task once directly and once per job, in a child process (Inspect sets up
    logging and environment state we keep out of the test process), with task_file
    recorded relative to the working directory as on a worker."""
    root = tmp_path_factory.mktemp("merge_logs")
    (root / "merge_task.py").write_text(TASK_SOURCE)
    env = {k: v for k, v in os.environ.items() if k != BOOM_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", GENERATE_SOURCE],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    return Logs(
        direct=Path(out["direct"]),
        jobs={(sid, epoch): Path(p) for sid, epoch, p in out["jobs"]},
        boom_job=Path(out["boom_job"]),
        boom_direct=Path(out["boom_direct"]),
        variant_job=Path(out["variant_job"]),
    )


def stage(src: Path, dst_dir: Path, epoch: int, name: str | None = None) -> Path:
    """Copy a job's log as a worker would upload it, relabelled to `epoch`."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / (name or f"job-{src.parent.name}-e{epoch}.eval")
    shutil.copyfile(src, dst)
    relabel_epoch(dst, epoch)
    return dst


def stage_all(logs: Logs, dst_dir: Path, skip: set[tuple[int, int]] = frozenset()) -> list[Path]:
    return [stage(path, dst_dir, epoch) for (sid, epoch), path in logs.jobs.items() if (sid, epoch) not in skip]


def metric_values(log: EvalLog) -> dict[tuple[str, str], float]:
    assert log.results is not None
    return {(score.name, name): metric.value for score in log.results.scores for name, metric in score.metrics.items()}


def assert_metrics_equal(merged: EvalLog, direct: EvalLog) -> None:
    got, want = metric_values(merged), metric_values(direct)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-9), key


def sample_keys(log: EvalLog) -> list[tuple[int | str, int]]:
    assert log.samples is not None
    return [(s.id, s.epoch) for s in log.samples]


def raw_bytes(path: Path, name: str) -> bytes:
    """An entry's compressed bytes as stored in the archive."""
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        info = zf.getinfo(name)
        f.seek(info.header_offset)
        header = f.read(30)
        f.seek(
            info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")
        )
        return f.read(info.compress_size)


ALL_KEYS = sorted((sid, epoch) for sid in IDS for epoch in range(1, EPOCHS + 1))


# ----------------------------------------------------------------------------- parity


def test_merge_matches_direct_run(logs: Logs, tmp_path: Path) -> None:
    inputs = stage_all(logs, tmp_path / "in")
    [task] = merge_eval_logs(inputs, tmp_path / "out", sample_ids=IDS, epochs=EPOCHS)

    direct = read_eval_log(str(logs.direct))
    merged = read_eval_log(str(task.path))

    assert task.status == merged.status == "success"
    assert merged.error is None
    assert (task.samples_expected, task.samples_present) == (15, 15)
    assert task.missing == [] and task.errors == [] and task.duplicates_dropped == 0
    assert task.path == tmp_path / "out" / "merge_task.eval"
    assert task.task == "merge_task"

    assert len(merged.samples) == len(direct.samples) == 15
    assert sorted(sample_keys(merged)) == ALL_KEYS
    assert sample_keys(merged) == sample_keys(direct)  # same (epoch, id) order

    assert_metrics_equal(merged, direct)
    assert merged.results.total_samples == direct.results.total_samples == 15
    assert merged.results.completed_samples == direct.results.completed_samples == 15
    assert merged.results.headline == direct.results.headline
    assert [(r.scorer, r.reducer) for r in merged.reductions] == [(r.scorer, r.reducer) for r in direct.reductions]
    for got, want in zip(merged.reductions, direct.reductions, strict=True):
        assert [(s.sample_id, s.value) for s in got.samples] == [
            (s.sample_id, pytest.approx(s.value, abs=1e-9)) for s in want.samples
        ]

    # the summary table agrees with the header
    for score in direct.results.scores:
        for name, metric in score.metrics.items():
            assert task.metrics[score.name][name] == pytest.approx(metric.value, abs=1e-9)
    assert task.score_rates["verdict"] == pytest.approx(3 / 5)
    assert task.score_rates["size"] == 0.0

    # the header describes the whole run
    assert merged.eval.dataset.sample_ids == IDS
    assert merged.eval.config.epochs == EPOCHS
    assert merged.eval.config.sample_id is None
    assert merged.eval.config.limit is None
    assert merged.eval.task_file == direct.eval.task_file
    assert merged.invalidated is False
    jobs = [read_eval_log(str(p), header_only=True) for p in inputs]
    assert merged.stats.started_at == min(j.stats.started_at for j in jobs)
    assert merged.stats.completed_at == max(j.stats.completed_at for j in jobs)
    assert all(merged.eval.eval_id != j.eval.eval_id for j in jobs)

    # summaries come along with each sample's epoch
    summaries = read_eval_log_sample_summaries(str(task.path))
    assert sorted((s.id, s.epoch) for s in summaries) == ALL_KEYS

    # streaming readers see every sample
    streamed = list(read_eval_log_samples(str(task.path), all_samples_required=True))
    assert sorted((s.id, s.epoch) for s in streamed) == ALL_KEYS

    # sample entries are the inputs' compressed bytes, copied without recompressing
    src = inputs[0]
    with zipfile.ZipFile(src) as zf:
        [entry] = [n for n in zf.namelist() if n.startswith("samples/")]
    assert raw_bytes(task.path, entry) == raw_bytes(src, entry)


def test_remerge_is_stable(logs: Logs, tmp_path: Path) -> None:
    inputs = stage_all(logs, tmp_path / "in")
    [a] = merge_eval_logs(inputs, tmp_path / "a", sample_ids=IDS, epochs=EPOCHS)
    later = time.time() + 2.5  # past the zip format's 2-second clock: a stamp of the time of writing differs
    while time.time() < later:
        time.sleep(0.1)
    [b] = merge_eval_logs(reversed(inputs), tmp_path / "b", sample_ids=IDS, epochs=EPOCHS)
    assert a.path.read_bytes() == b.path.read_bytes()  # the same results, the same bytes
    ha = read_eval_log(str(a.path), header_only=True)
    hb = read_eval_log(str(b.path), header_only=True)
    assert (ha.eval.eval_id, ha.eval.run_id, ha.eval.task_id) == (
        hb.eval.eval_id,
        hb.eval.run_id,
        hb.eval.task_id,
    )
    assert ha.eval.created == hb.eval.created
    assert ha.results == hb.results
    # nothing but the merged log is left in the output directory
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["merge_task.eval"]


def test_defaults_infer_ids_and_epochs(logs: Logs, tmp_path: Path) -> None:
    inputs = stage_all(logs, tmp_path / "in")
    [task] = merge_eval_logs(inputs, tmp_path / "out", name="my run")
    assert task.path.name == "my_run.eval"
    assert task.status == "success" and task.samples_expected == 15
    header = read_eval_log(str(task.path), header_only=True)
    assert header.eval.dataset.sample_ids == IDS
    assert header.eval.config.epochs == EPOCHS


# ----------------------------------------------------------------------------- gaps


def test_missing_sample_makes_an_error_log(logs: Logs, tmp_path: Path) -> None:
    inputs = stage_all(logs, tmp_path / "in", skip={(4, 2)})
    [task] = merge_eval_logs(inputs, tmp_path / "out", sample_ids=IDS, epochs=EPOCHS)

    assert task.status == "error"
    assert task.missing == [(4, 2)]
    assert (task.samples_expected, task.samples_present) == (15, 14)
    merged = read_eval_log(str(task.path))
    assert merged.status == "error"
    assert merged.error is not None
    assert "1 of 15 samples missing" in merged.error.message
    assert "(4, 2)" in merged.error.message
    assert len(merged.samples) == 14
    assert merged.results.total_samples == 15
    assert merged.results.completed_samples == 14
    # the header still names the whole run, so a retry would run only what is missing
    assert merged.eval.dataset.sample_ids == IDS
    assert merged.eval.config.epochs == EPOCHS
    streamed = list(read_eval_log_samples(str(task.path), all_samples_required=False))
    assert len(streamed) == 14
    with pytest.raises(RuntimeError):
        list(read_eval_log_samples(str(task.path), all_samples_required=True))


def test_subset_selection_keeps_sample_id(logs: Logs, tmp_path: Path) -> None:
    inputs = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in (2, 4)]
    [task] = merge_eval_logs(inputs, tmp_path / "out", sample_ids=["4", "2"], epochs=1)
    assert task.status == "success"
    header = read_eval_log(str(task.path), header_only=True)
    # original id types, intended order
    assert header.eval.dataset.sample_ids == [4, 2]
    assert header.eval.config.sample_id == [4, 2]


def test_duplicate_with_error_is_dropped(logs: Logs, tmp_path: Path) -> None:
    for boom_name in ("a-boom.eval", "z-boom.eval"):  # either side of the good copy
        d = tmp_path / boom_name
        inputs = [stage(logs.jobs[(sid, 1)], d / "in", 1) for sid in IDS]
        inputs.append(stage(logs.boom_job, d / "in", 1, name=boom_name))
        [task] = merge_eval_logs(inputs, d / "out", sample_ids=IDS, epochs=1)
        assert task.status == "success", task
        assert task.duplicates_dropped == 1
        assert task.errors == []
        merged = read_eval_log(str(task.path))
        assert len(merged.samples) == 5
        [sample] = [s for s in merged.samples if s.id == BOOM_ID]
        assert sample.error is None and sample.scores


def test_duplicate_keeps_newest(logs: Logs, tmp_path: Path) -> None:
    older = stage(logs.jobs[(1, 1)], tmp_path / "in", 1, name="z-older.eval")
    newer = stage(logs.jobs[(1, 3)], tmp_path / "in", 1, name="a-newer.eval")  # ran later
    [task] = merge_eval_logs([older, newer], tmp_path / "out", epochs=1)
    assert task.duplicates_dropped == 1
    [kept] = read_eval_log(str(task.path)).samples
    [want] = read_eval_log(str(newer)).samples
    assert kept.uuid == want.uuid


def test_errored_sample_is_listed_and_left_out_of_metrics(logs: Logs, tmp_path: Path) -> None:
    inputs = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS if sid != BOOM_ID]
    inputs.append(stage(logs.boom_job, tmp_path / "in", 1, name="boom.eval"))
    [task] = merge_eval_logs(inputs, tmp_path / "out", sample_ids=IDS, epochs=1)

    assert task.errors == [(BOOM_ID, 1, "RuntimeError('boom 3')")]
    assert task.samples_present == 5 and task.missing == []
    # the workers ran with Inspect's default fail_on_error, under which any error fails
    assert task.status == "error"
    merged = read_eval_log(str(task.path))
    assert merged.status == "error"
    assert "1 of 5 samples failed" in merged.error.message
    assert "boom 3" in merged.error.message
    assert len(merged.samples) == 5

    direct = read_eval_log(str(logs.boom_direct))  # the same errors in one direct run
    assert_metrics_equal(merged, direct)
    assert merged.results.completed_samples == direct.results.completed_samples == 4
    assert merged.results.total_samples == direct.results.total_samples == 5
    assert task.score_rates["verdict"] == pytest.approx(3 / 4)


def test_mismatched_identity_gives_two_logs(logs: Logs, tmp_path: Path) -> None:
    inputs = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS]
    inputs.append(stage(logs.variant_job, tmp_path / "in", 1, name="variant.eval"))
    tasks = merge_eval_logs(inputs, tmp_path / "out", epochs=1)

    assert len(tasks) == 2
    assert len({t.path for t in tasks}) == 2
    assert all(t.path.name.startswith("merge_task-") for t in tasks)
    by_size = sorted(tasks, key=lambda t: t.samples_present)
    assert [t.samples_present for t in by_size] == [1, 5]
    variant = read_eval_log(str(by_size[0].path))
    assert variant.eval.task_args["variant"] == 1
    assert variant.eval.dataset.sample_ids == [1]
    main = read_eval_log(str(by_size[1].path))
    assert main.eval.task_args["variant"] == 0


def test_unusable_inputs_are_skipped(logs: Logs, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inputs = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS]
    truncated = tmp_path / "in" / "truncated.eval"
    truncated.write_bytes(inputs[0].read_bytes()[:200])
    unfinished = tmp_path / "in" / "unfinished.eval"  # no header.json: still running
    with zipfile.ZipFile(inputs[1]) as src, evalzip.open_writer(str(unfinished)) as dst:
        for name in src.namelist():
            if name not in ("header.json", "summaries.json", "reductions.json"):
                dst.writestr(name, src.read(name))
    with caplog.at_level(logging.WARNING, logger="ct_fleet.merge"):
        [task] = merge_eval_logs([*inputs, truncated, unfinished], tmp_path / "out", epochs=1)
    assert task.status == "success" and task.samples_present == 5
    assert "truncated.eval" in caplog.text and "unfinished.eval" in caplog.text


def _rewrite(src: Path, dst: Path, replace: dict[str, bytes | None]) -> Path:
    """A copy of src with some entries replaced (None: left out)."""
    with zipfile.ZipFile(src) as zin, evalzip.open_writer(str(dst)) as zout:
        for name in zin.namelist():
            if name in replace:
                if replace[name] is not None:
                    zout.writestr(name, replace[name])
            else:
                zout.writestr(name, zin.read(name))
    return dst


def _corrupt_sample_bytes(src: Path, dst: Path) -> Path:
    """A copy whose sample entry's compressed bytes are damaged (its CRC no longer matches)."""
    shutil.copyfile(src, dst)
    with zipfile.ZipFile(dst) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("samples/"))
    data = bytearray(dst.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    middle = start + info.compress_size // 2
    data[middle : middle + 8] = bytes(8)
    dst.write_bytes(bytes(data))
    return dst


def malformed_logs(good: Path, where: Path) -> dict[str, Path]:
    """Logs whose header may say success but whose body is not a log Inspect can read."""
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(good) as zf:
        header = json.loads(zf.read("header.json"))
        sample = next(n for n in zf.namelist() if n.startswith("samples/"))
    return {
        "junk summaries": _rewrite(good, where / "a.eval", {"summaries.json": b"this is not json"}),
        "summaries of strings": _rewrite(good, where / "b.eval", {"summaries.json": b'["x", "y"]'}),
        "header a list": _rewrite(good, where / "c.eval", {"header.json": b"[1, 2]"}),
        "header without eval": _rewrite(
            good, where / "d.eval", {"header.json": json.dumps({"status": "success"}).encode()}
        ),
        "sample junk json": _rewrite(good, where / "e.eval", {sample: b"{not json"}),
        "sample bytes damaged": _corrupt_sample_bytes(good, where / "f.eval"),
        "no sample at all": _rewrite(good, where / "g.eval", {sample: None}),
        "not a zip": _write(where / "h.eval", b"PK\x03\x04 but nothing else"),
        "header says success, no body": _write_zip(where / "i.eval", {"header.json": json.dumps(header).encode()}),
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _write_zip(path: Path, entries: dict[str, bytes]) -> Path:
    with evalzip.open_writer(str(path)) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return path


def test_malformed_finished_logs_are_left_out_and_named(logs: Logs, tmp_path: Path) -> None:
    from ct_fleet.evallog import problem

    good = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS]
    bad = malformed_logs(good[0], tmp_path / "bad")
    for kind, path in bad.items():
        assert problem(path) is not None, kind  # a result like this never counts
    assert all(problem(p) is None for p in good)
    skipped: list[tuple[Path, str]] = []
    [task] = merge_eval_logs(
        [*good[1:], *bad.values()],
        tmp_path / "out",
        sample_ids=IDS,
        epochs=1,
        on_skip=lambda p, why: skipped.append((p, why)),
    )
    # The bad copies of sample IDS[0] are left out (the summary-less one keeps nothing either).
    assert task.samples_present == len(IDS) - 1 and task.missing == [(IDS[0], 1)]
    named = {p.name for p, _ in skipped}
    assert named >= {"a.eval", "b.eval", "c.eval", "d.eval", "f.eval", "h.eval"}, skipped
    assert all(why for _, why in skipped)
    merged = read_eval_log(str(task.path))  # and the output reads in full
    assert len(merged.samples or []) == len(IDS) - 1


def test_merge_dir_excludes_its_output(logs: Logs, tmp_path: Path) -> None:
    src = tmp_path / "run"
    stage_all(logs, src / "results")
    out = src / "merged"
    for _ in range(2):  # the second pass must not read the first's output
        [task] = merge_dir(src, out, sample_ids=IDS, epochs=EPOCHS)
        assert isinstance(task, MergedTask)
        assert task.samples_present == 15 and task.duplicates_dropped == 0
    assert sorted(p.name for p in out.iterdir()) == ["merge_task.eval"]


# ----------------------------------------------------------------------------- relabel


def test_relabel_epoch(logs: Logs, tmp_path: Path) -> None:
    path = tmp_path / "job.eval"
    shutil.copyfile(logs.jobs[(2, 1)], path)
    before = path.read_bytes()
    header_before = raw_bytes(path, "header.json")

    relabel_epoch(path, 1)  # no-op
    assert path.read_bytes() == before

    relabel_epoch(path, 3)
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        journal = json.loads(zf.read("_journal/summaries/1.json"))
    assert "samples/2_epoch_3.json" in names
    assert "samples/2_epoch_1.json" not in names
    assert [row["epoch"] for row in journal] == [3]
    assert raw_bytes(path, "header.json") == header_before  # everything else untouched

    log = read_eval_log(str(path))
    assert log.status == "success"
    assert [(s.id, s.epoch) for s in log.samples] == [(2, 3)]
    assert [(s.id, s.epoch) for s in read_eval_log_sample_summaries(str(path))] == [(2, 3)]
    original = read_eval_log(str(logs.jobs[(2, 1)]))
    assert log.samples[0].model_dump(exclude={"epoch"}) == original.samples[0].model_dump(exclude={"epoch"})

    relabelled = path.read_bytes()
    relabel_epoch(path, 3)  # already epoch 3: no-op
    assert path.read_bytes() == relabelled
    with pytest.raises(ValueError):
        relabel_epoch(path, 2)  # only epoch 1 can be relabelled
    assert [p.name for p in tmp_path.iterdir()] == ["job.eval"]  # no temp files left


def rewrite_header(path: Path, edit) -> None:
    """Edit an input's header.json in place (simulating other workers' stats/flags)."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, evalzip.open_writer(str(tmp)) as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "header.json":
                header = json.loads(data)
                edit(header)
                data = json.dumps(header).encode()
            dst.writestr(name, data)
    tmp.replace(path)


def test_a_resumed_samples_earlier_attempts_time_is_added_to_its_sample_and_summary(logs: Logs, tmp_path: Path) -> None:
    path = tmp_path / "job.eval"
    shutil.copyfile(logs.jobs[(2, 1)], path)
    header_before = raw_bytes(path, "header.json")
    original = read_eval_log(str(logs.jobs[(2, 1)])).samples[0]
    assert original.total_time is not None and original.working_time is not None

    add_prior_time(path, 12.5, 10.25)
    (sample,) = read_eval_log(str(path)).samples
    assert sample.total_time == round(original.total_time + 12.5, 3)
    assert sample.working_time == round(original.working_time + 10.25, 3)
    (summary,) = read_eval_log_sample_summaries(str(path))
    assert (summary.total_time, summary.working_time) == (sample.total_time, sample.working_time)
    assert sample.model_dump(exclude={"total_time", "working_time"}) == original.model_dump(
        exclude={"total_time", "working_time"}
    )
    assert raw_bytes(path, "header.json") == header_before
    relabel_epoch(path, 2)  # the worker relabels after it: the times stay
    (sample,) = read_eval_log(str(path)).samples
    assert (sample.epoch, sample.total_time) == (2, round(original.total_time + 12.5, 3))
    assert [p.name for p in tmp_path.iterdir()] == ["job.eval"]


def test_stats_and_invalidated_are_merged(logs: Logs, tmp_path: Path) -> None:
    inputs = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS]
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "total_cost": 0.5}

    def add_usage(header):
        header["stats"]["model_usage"] = {"mockllm/model": usage}

    def invalidate(header):
        header["invalidated"] = True

    for path in inputs[:2]:
        rewrite_header(path, add_usage)
    rewrite_header(inputs[3], invalidate)
    [task] = merge_eval_logs(inputs, tmp_path / "out", epochs=1)
    merged = read_eval_log(str(task.path), header_only=True)
    total = merged.stats.model_usage["mockllm/model"]
    assert (total.input_tokens, total.output_tokens, total.total_tokens) == (20, 10, 30)
    assert total.total_cost == pytest.approx(1.0)
    assert merged.invalidated is True


# ----------------------------------------------------------------------------- kept spool


def _cost(k: int) -> float:
    return 1e16 if k == 0 else 1.5  # the first's ulp is 2: where the 1.5s are added changes the sum


def _tell_apart(inputs: list[Path]) -> None:
    """Headers that differ where a merge must pick one (the template's metadata) or add
    in an order (costs whose float sum depends on it), as workers' logs do."""
    for k, path in enumerate(inputs):

        def edit(header, k=k, name=path.name):
            header["eval"]["metadata"] = {"copy": name}
            usage = {"input_tokens": k, "output_tokens": 1, "total_tokens": k + 1, "total_cost": _cost(k)}
            header["stats"]["model_usage"] = {"mockllm/model": usage}

        rewrite_header(path, edit)


def test_a_merger_fed_out_of_path_order_writes_what_one_merge_writes(logs: Logs, tmp_path: Path) -> None:
    inputs = sorted(stage_all(logs, tmp_path / "in"))
    _tell_apart(inputs)
    costs = [_cost(k) for k in range(len(inputs))]
    assert sum(costs) != sum(costs[1::3] + costs[2::3] + costs[0::3]), "the sum must depend on the order"
    [whole] = merge_eval_logs(inputs, tmp_path / "whole", sample_ids=IDS, epochs=EPOCHS)

    arrived: list[Path] = []
    with Merger() as merger:
        for batch in (inputs[1::3], inputs[2::3], inputs[0::3]):  # each batch before the last by path
            arrived += batch
            merger.add(arrived)
            [live] = merger.write(tmp_path / "live", sample_ids=IDS, epochs=EPOCHS, live=True)
            assert live.samples_present == len(arrived) and live.status == "started"
        [done] = merger.write(tmp_path / "live", sample_ids=IDS, epochs=EPOCHS)
    assert done.status == whole.status == "success"
    assert done.path.read_bytes() == whole.path.read_bytes()


def test_a_merger_starts_again_when_an_input_changed_and_names_every_skip_each_time(logs: Logs, tmp_path: Path) -> None:
    staged = {sid: stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS}
    inputs = sorted(staged.values())
    junk = _write(tmp_path / "in" / "junk.eval", b"not a log")
    skips: list[str] = []
    with Merger() as merger:
        merger.add([*inputs, junk])
        [before] = merger.write(tmp_path / "out", epochs=1, on_skip=lambda path, why: skips.append(path.name))
        assert before.errors == []
        # A result replaced in place: this sample now errored.
        stage(logs.boom_job, tmp_path / "boom", 1).replace(staged[BOOM_ID])
        merger.add([*inputs, junk])
        [task] = merger.write(tmp_path / "out", epochs=1, on_skip=lambda path, why: skips.append(path.name))
    [scratch] = merge_eval_logs([*inputs, junk], tmp_path / "scratch", epochs=1)
    assert skips == ["junk.eval", "junk.eval"]
    assert task.errors == scratch.errors != []
    assert task.path.read_bytes() == scratch.path.read_bytes()


@pytest.mark.parametrize(
    "sample",
    [
        '{"id":2,"epoch":1,"input":"q"}',
        '{"id":"a\\",\\"epoch\\":1,","epoch":1,"input":"q"}',  # id text that looks like a field
        '{"epoch":1,"id":2,"input":"q"}',  # other key order: JSON round trip
    ],
)
def test_patch_sample_epoch(sample: str) -> None:
    from ct_fleet.evallog.relabel import _patch_sample_epoch

    patched = json.loads(_patch_sample_epoch(sample.encode(), 1, 7, "test"))
    original = json.loads(sample)
    assert patched == {**original, "epoch": 7}


def rewrite_entries(path: Path, edit) -> None:
    """Edit an input's JSON entries in place: edit(name, value) returns the new value."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, evalzip.open_writer(str(tmp)) as dst:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith(".json"):
                data = json.dumps(edit(name, json.loads(data))).encode()
            dst.writestr(name, data)
    tmp.replace(path)


def staged_with_scores(
    logs: Logs, tmp_path: Path, reducer: list[str] | None, scores_of: Callable[[int, int, dict], dict]
) -> list[Path]:
    """Each job's log staged as its epoch, with `reducer` as the epochs reducer and each
    sample's scores replaced by scores_of(sample id, epoch, scores)."""
    inputs = []
    for (sid, epoch), path in logs.jobs.items():
        staged = stage(path, tmp_path / "in", epoch)

        def edit(name: str, value, sid=sid, epoch=epoch):
            if name in ("header.json", "_journal/start.json"):
                value["eval"]["config"]["epochs_reducer"] = reducer
            elif name == "summaries.json" or name.startswith("_journal/summaries/"):
                for row in value:
                    row["scores"] = scores_of(sid, epoch, row["scores"])
            return value

        rewrite_entries(staged, edit)
        inputs.append(staged)
    return inputs


@pytest.mark.parametrize(
    "reducer",
    [None, ["mean", "max"], ["mode"], ["median"], ["at_least_2"], ["pass_at_2"], ["max", "mean", "mode"], []],
)
def test_scores_reduced_per_sample_equal_eval_results_over_every_score(
    logs: Logs, tmp_path: Path, reducer: list[str] | None
) -> None:
    """The merge reduces each sample's epochs as it streams; Inspect's eval_results takes
    every score at once. With scores that differ by epoch they must agree exactly."""
    from inspect_ai.scorer import SampleScore, Score

    from ct_fleet.inspect_private import (
        eval_results,
        metrics_from_log_header,
        reducers_from_log_header,
        resolve_scorers_info,
    )

    def vary(sid: int, epoch: int, scores: dict) -> dict:
        scores = json.loads(json.dumps(scores))
        scores["size"]["value"] = round(sid**2 / 7 + (epoch * sid) % 3 * 0.25, 6)
        scores["verdict"]["value"] = "C" if (sid + epoch) % 3 else "I"
        return scores

    inputs = staged_with_scores(logs, tmp_path, reducer, vary)
    [task] = merge_eval_logs(reversed(inputs), tmp_path / "out", sample_ids=IDS, epochs=EPOCHS)
    merged = read_eval_log(str(task.path))

    # eval_results over every score, in the order of the merged log's samples (epoch-major)
    summaries = {(s.id, s.epoch): s for s in read_eval_log_sample_summaries(str(task.path))}
    ordered = [summaries[(sid, epoch)] for epoch in range(1, EPOCHS + 1) for sid in IDS]
    scores = [
        {name: SampleScore(score=Score.model_validate(v.model_dump()), sample_id=s.id) for name, v in s.scores.items()}
        for s in ordered
    ]
    want, want_reductions = eval_results(
        samples=len(ordered),
        scores=scores,
        reducers=reducers_from_log_header(merged),
        scorers=resolve_scorers_info(merged),
        metrics=metrics_from_log_header(merged),
        completed_samples=len(ordered),
    )
    assert merged.results is not None
    assert merged.results.model_dump() == want.model_dump()
    assert [r.model_dump() for r in merged.reductions or []] == [r.model_dump() for r in want_reductions or []]
    assert len(merged.results.scores) >= 2


# ----------------------------------------------------------------------------- fast paths


def member_contents(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_fast_reader_gives_the_log_zipfile_gives(logs: Logs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs read whole, entry by entry, or by zipfile alone: the same merged log."""
    from ct_fleet.evallog import reader

    inputs = stage_all(logs, tmp_path / "in")
    [fast] = merge_eval_logs(inputs, tmp_path / "fast", sample_ids=IDS, epochs=EPOCHS)
    with monkeypatch.context() as m:
        m.setattr(reader, "WHOLE", 0)
        [by_entry] = merge_eval_logs(inputs, tmp_path / "by_entry", sample_ids=IDS, epochs=EPOCHS)

    def unsure(*args: object) -> None:
        raise reader._Unsure

    with monkeypatch.context() as m:
        m.setattr(reader.EvalZip, "_directory", unsure)
        m.setattr(reader.EvalZip, "_fast", unsure)
        [slow] = merge_eval_logs(inputs, tmp_path / "slow", sample_ids=IDS, epochs=EPOCHS)
    want = member_contents(slow.path)
    assert member_contents(fast.path) == want
    assert member_contents(by_entry.path) == want
    header = read_eval_log(str(fast.path), header_only=True)
    assert header.status == "success" and header.results is not None
    assert sorted(sample_keys(read_eval_log(str(fast.path)))) == ALL_KEYS


@pytest.mark.parametrize("reducer", [None, ["mean", "max", "mode"]])
def test_value_only_metrics_give_the_results_of_full_scores(
    logs: Logs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reducer: list[str] | None
) -> None:
    """Inspect's own value-only metrics get one shared SampleScore per distinct value;
    the merged log is the one every metric given the full scores makes."""
    from ct_fleet.merge import reduced

    def mixed_values(sid: int, epoch: int, scores: dict) -> dict:
        scores["size"]["value"] = [1, 2.5, True, float("nan")][(sid + epoch) % 4]
        return scores

    inputs = staged_with_scores(logs, tmp_path, reducer, mixed_values)
    lists: list[list[object]] = []
    for_metrics = reduced.ReducedScores.for_metrics

    def spy(self, name, view, metrics):  # type: ignore[no-untyped-def]
        scores = for_metrics(self, name, view, metrics)
        lists.append(scores)
        return scores

    with monkeypatch.context() as m:
        m.setattr(reduced.ReducedScores, "for_metrics", spy)
        [light] = merge_eval_logs(inputs, tmp_path / "light", sample_ids=IDS, epochs=EPOCHS)
    assert lists and any(len({id(s) for s in scores}) < len(scores) for scores in lists)  # shared
    with monkeypatch.context() as m:
        m.setattr(reduced, "value_only", lambda metrics: False)
        [full] = merge_eval_logs(inputs, tmp_path / "full", sample_ids=IDS, epochs=EPOCHS)
    assert member_contents(light.path) == member_contents(full.path)
    merged = read_eval_log(str(light.path))
    assert merged.results is not None and len(merged.results.scores) >= 2
    assert merged.reductions and all(len(r.samples) == len(IDS) for r in merged.reductions)


def test_value_only_metrics_read_only_the_value() -> None:
    """VALUE_ONLY names Inspect's metrics as they are in this inspect_ai: each still
    exists under that function, and its code reads nothing of a SampleScore but the value."""
    import inspect

    from inspect_ai.util import registry_create

    from ct_fleet.merge.reduced import VALUE_ONLY, value_only

    for name, qualname in sorted(VALUE_ONLY):
        metric = registry_create("metric", name)
        assert metric.__qualname__ == qualname, name
        source = inspect.getsource(metric)
        for other in ("sample_metadata", "sample_id", "metadata", "answer", "explanation", "history"):
            assert other not in source, (name, other)
        assert value_only([metric])
    assert not value_only([registry_create("metric", "inspect_ai/stderr", cluster="group")])
    assert not value_only({"size": [registry_create("metric", "inspect_ai/mean")]})


def test_stats_of_superseded_inputs_are_left_out(logs: Logs, tmp_path: Path) -> None:
    """The header's usage and flags come from the inputs whose samples are kept."""
    older = stage(logs.jobs[(1, 1)], tmp_path / "in", 1, name="z-older.eval")
    newer = stage(logs.jobs[(1, 3)], tmp_path / "in", 1, name="a-newer.eval")
    others = [stage(logs.jobs[(sid, 1)], tmp_path / "in", 1) for sid in IDS if sid != 1]

    def usage(tokens: int, invalidated: bool):
        def edit(header):
            header["stats"]["model_usage"] = {
                "mockllm/model": {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens}
            }
            header["invalidated"] = invalidated

        return edit

    rewrite_header(older, usage(1000, True))
    rewrite_header(newer, usage(7, False))
    for path in others:
        rewrite_header(path, usage(1, False))
    [task] = merge_eval_logs([older, newer, *others], tmp_path / "out", sample_ids=IDS, epochs=1)
    assert task.duplicates_dropped == 1
    header = read_eval_log(str(task.path), header_only=True)
    assert header.stats.model_usage["mockllm/model"].input_tokens == 7 + len(others)
    assert header.invalidated is False
    [every] = merge_eval_logs([newer, *others], tmp_path / "every", sample_ids=IDS, epochs=1)
    assert read_eval_log(str(every.path), header_only=True).stats == header.stats


# ----------------------------------------------------------------------------- the intended ids


def _spool_with(ids: list[str | int], epoch: int = 1) -> Spool:
    spool = Spool()
    member = evalzip.RawMember("samples/x.json", 0, 0, 0, 0, 0, (1980, 1, 1, 0, 0, 0), 0, 3)
    for sample_id in ids:
        epoch += 1  # every id a record of its own, also an int and a str of one text
        spool.add_record(0, sample_id, epoch, 0, None, datetime.now(UTC), b"{}", member)
    return spool


AWKWARD_IDS: list[str | int] = [
    3,
    -7,
    10**30,
    -(10**30),
    0,
    10**19,
    -1,
    25,
    "b",
    "a",
    "é",
    "10",
    "",
    "Z",
    "日本",
    'q"uote\\',
    "tab\t",
    "\x01",
    5,
]


def test_the_spool_orders_the_ids_it_saw_as_sorted_does() -> None:
    """ints by value (beyond 64 bits too), then strs by code point; an int and a str of the
    same text are one id, the one whose pickle sorts first, as the merge always took."""
    ids = [*AWKWARD_IDS, "5", "-7"]
    spool = _spool_with(ids)
    try:
        seen: dict[str, str | int] = {}
        for sample_id in ids:
            key = str(sample_id)
            if key not in seen or pickle.dumps(sample_id, protocol=5) < pickle.dumps(seen[key], protocol=5):
                seen[key] = sample_id
        want = sorted(seen.values(), key=lambda s: (0, s) if isinstance(s, int) else (1, s))
        assert spool.select(0, None) == len(want)
        assert [i for batch in spool.intended() for i in batch] == want
        assert [i for batch in spool.intended(typed=False) for i in batch] == [str(i) for i in want]
    finally:
        spool.close()


def test_the_spool_keeps_given_ids_in_order_once_with_the_type_seen() -> None:
    spool = _spool_with([4, "x", 2])
    try:
        assert spool.select(0, ["4", 2, "y", 9, "4", 4]) == 4
        assert [i for batch in spool.intended() for i in batch] == [4, 2, "y", 9]
    finally:
        spool.close()


def test_ids_are_written_as_inspect_writes_them(tmp_path: Path) -> None:
    """The header entries get the ids from the spool where the placeholder stands, each
    encoded byte for byte as Inspect's JSON of the whole list encodes it."""
    from ct_fleet.inspect_private import to_json_safe
    from ct_fleet.merge.header import SAMPLE_IDS
    from ct_fleet.merge.write import write_with_ids

    ids = [*AWKWARD_IDS, *range(1000, 4000)]  # more than one batch
    spool = _spool_with(ids)
    try:
        spool.select(0, ids)
        with_placeholder = to_json_safe(
            {"dataset": {"sample_ids": [SAMPLE_IDS]}, "config": {"sample_id": [SAMPLE_IDS]}}, indent=None
        )
        whole = to_json_safe({"dataset": {"sample_ids": ids}, "config": {"sample_id": ids}}, indent=None)
        path = tmp_path / "ids.zip"
        with zipfile.ZipFile(path, "w") as out:
            write_with_ids(out, "header.json", with_placeholder, spool, (1980, 1, 1, 0, 0, 0))
        with zipfile.ZipFile(path) as src:
            assert src.read("header.json") == whole
        spool.select(0, [])
        with zipfile.ZipFile(path, "w") as out:
            write_with_ids(out, "header.json", with_placeholder, spool, (1980, 1, 1, 0, 0, 0))
        with zipfile.ZipFile(path) as src:
            assert json.loads(src.read("header.json")) == {"dataset": {"sample_ids": []}, "config": {"sample_id": []}}
    finally:
        spool.close()


def test_an_id_of_streamed_parts_is_the_id_of_the_whole_parts() -> None:
    from ct_fleet.merge.header import canonical_ids
    from ct_fleet.merge.util import canonical, short_id, short_id_of

    assert short_id_of([b"eval"], [b"k", b"ey"], [], [b"[", b'"1"', b"]"]) == short_id("eval", "key", "", '["1"]')
    assert short_id_of([b"eval"], [b"key"]) != short_id("eval", "ke", "y")
    ids = [*AWKWARD_IDS, *range(1000, 4000)]
    spool = _spool_with(ids)
    try:
        for selected in ([], ids):
            spool.select(0, selected)
            assert b"".join(canonical_ids(spool)) == canonical([str(i) for i in selected])
    finally:
        spool.close()
