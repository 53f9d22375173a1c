"""One complete local run (smoke x 2 epochs, Inspect's local sandbox), shared by the tests
that read it or start from it: its workers left on the end-of-run signal, not after
idle_timeout (see test_end_of_run.py); a rerun of a copy of it runs only the results that
are missing or unreadable; new_fleet=true runs everything again under a new id."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from inspect_ai.log import EvalLog, read_eval_log, write_eval_log

from ct_fleet.controller.fleet.live_merge import LiveMerge
from ct_fleet.controller.fleet.merging import FleetMerge, merge_fleet
from ct_fleet.evallog.header import read_header
from ct_fleet.merge.util import timestamp
from ct_fleet.protocol import Manifest, run_layout
from testkit.fleet import (
    FAST,
    LOCAL,
    ONE_WORKER,
    REPO,
    Run,
    assert_nothing_running,
    env_for,
    finish,
    fleet_dir,
    launch,
    merged_pairs,
    start,
    stat,
    wait_for,
)

IDLE_TIMEOUT = 600  # far longer than any bound below: only the signal ends the workers
# live_merge_interval=1: merged/ is rewritten during the run as often as it can be.
ARGS = ["--task-file", "smoke", "--epochs", "2", "--ec2-arg", "live_merge_interval=1", *FAST, *LOCAL]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("local-run") / "runs"
    proc = start(runs, *ARGS, "--ec2-arg", f"idle_timeout={IDLE_TIMEOUT}")
    code, out, err = finish(proc, timeout=IDLE_TIMEOUT - 60)  # waiting out idle_timeout fails this
    return runs, code, out, err


def copy_of(local_run, where: Path) -> Path:
    """The run's directory (results, manifest, code) copied to a runs dir of its own, for a
    test that changes it; the original stays as it ended."""
    runs, code, out, err = local_run
    assert code == 0, out + err
    copy = where / "runs"
    run_dir = fleet_dir(runs)
    shutil.copytree(run_dir, copy / run_dir.name, ignore=shutil.ignore_patterns("instances"))
    return copy


def _times(log: str, pattern: str) -> list[float]:
    found = []
    for line in log.splitlines():
        match = re.match(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO " + pattern, line)
        if match:
            found.append(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return found


@pytest.mark.e2e
def test_a_local_run_ends_within_seconds_of_its_last_result(local_run) -> None:
    runs, code, out, err = local_run
    assert code == 0, out + err
    assert len(set(merged_pairs(runs))) == 8
    logs = [p.read_text() for p in fleet_dir(runs).glob("instances/*/var/log/linuxbench-bootstrap.log")]
    assert logs
    last_job = max(t for log in logs for t in _times(log, r"job "))
    for log in logs:
        (left,) = _times(log, r"fleet is done \(")
        assert left >= last_job  # ordering: the signal follows the last result
        assert left - last_job < 60  # a generous bound; idle_timeout is 600 s
        assert "log uploaded to s3://" in log and "[shutdown] shutting down" in log
    assert_nothing_running(runs)


@pytest.mark.e2e
def test_the_merged_run_spans_the_fleet_not_only_its_samples(local_run) -> None:
    """A direct `inspect eval` spans the whole eval; the merged run spans launch to last
    result, which holds every sample's own span (the viewer shows the run's duration)."""
    runs, code, out, err = local_run
    assert code == 0, out + err
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    stats = read_eval_log(str(merged), header_only=True).stats
    jobs = [read_header(p)["stats"] for p in (fleet_dir(runs) / "jobs").glob("*.evaljob")]
    first, last = min(timestamp(j["started_at"]) for j in jobs), max(timestamp(j["completed_at"]) for j in jobs)
    # Launching and booting a worker comes before its first sample: strictly earlier.
    assert timestamp(stats.started_at) < first
    assert timestamp(stats.completed_at) >= last


@pytest.mark.faults
def test_rerun_enqueues_only_missing_or_unreadable_results(local_run, tmp_path: Path):
    runs = copy_of(local_run, tmp_path)
    results = sorted((fleet_dir(runs) / "jobs").glob("*.evaljob"))
    assert len(results) == 8
    for path in results[:3]:
        path.unlink()
    results[3].write_bytes(results[3].read_bytes()[:200])  # a truncated result does not count
    results[4].write_bytes(results[5].read_bytes())  # nor one that is another job's
    code, out, err = finish(start(runs, *ARGS, *ONE_WORKER))
    assert code == 0, out + err
    assert "8 jobs (3 already done)" in out and stat(out, "enqueued") == 5
    assert f"local result of job {results[4].stem} does not count (holds sample" in err
    assert len(set(merged_pairs(runs))) == 8
    assert_nothing_running(runs)


@pytest.mark.e2e
def test_new_fleet_runs_everything_again_under_a_new_id(local_run, tmp_path: Path):
    runs = copy_of(local_run, tmp_path)
    code, out, err = finish(start(runs, *ARGS, *ONE_WORKER, "--ec2-arg", "new_fleet=true"))
    assert code == 0, out + err
    assert "8 jobs (0 already done)" in out
    assert len([p for p in runs.iterdir() if (p / "manifest.json").exists()]) == 2


@pytest.mark.faults
def test_a_reader_that_leaves_early_does_not_stop_the_fleet(local_run, tmp_path: Path):
    """`ct-fleet eval ... | head -1`: the pipe closes after the first line; the run goes on."""
    import shlex

    from testkit.fleet import env_for

    runs = copy_of(local_run, tmp_path)
    for path in sorted((fleet_dir(runs) / "jobs").glob("*.evaljob"))[:4]:
        path.unlink()  # four jobs to run after the reader has gone
    command = shlex.join([str(REPO / "bin" / "ct-fleet"), "eval", *ARGS, *ONE_WORKER])
    proc = subprocess.run(
        ["bash", "-c", f'{command} | head -1; exit "${{PIPESTATUS[0]}}"'],
        cwd=REPO,
        env=env_for(runs),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert "stdout was closed by its reader; the run goes on" in proc.stderr
    assert len(set(merged_pairs(runs))) == 8
    assert_nothing_running(runs)


@pytest.mark.e2e
def test_the_run_report_draws_each_job_once_in_its_workers_slots(local_run) -> None:
    runs, code, out, err = local_run
    assert code == 0, out + err
    run_dir = fleet_dir(runs)
    page = run_dir / "report.html"
    assert f"report: {page}" in out
    data = json.loads((run_dir / "report.json").read_text())
    jobs = [j["job_id"] for j in json.loads((run_dir / "manifest.json").read_text())["jobs"]]
    assert sorted(b["job_id"] for b in data["bars"]) == sorted(jobs)
    assert {b["outcome"] for b in data["bars"]} == {"success"} and data["outcomes"] == {"success": len(jobs)}
    # One lane per slot of every launched worker; no two jobs at once in one lane.
    assert len(data["lanes"]) == sum(w["slots"] for w in data["workers"]) == 2 * 2
    for lane in range(len(data["lanes"])):
        spans = sorted((b["start"], b["end"]) for b in data["bars"] if b["lane"] == lane)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
        assert all(data["lanes"][b["lane"]]["instance_id"] == b["instance_id"] for b in data["bars"])
    for worker in data["workers"]:
        assert worker["why"] == "first" and worker["launched"] <= worker["booted"] <= worker["ready"]
        assert worker["ended"] is not None
    assert sum(data["throughput"]) == len(jobs)
    assert [p["phase"] for p in data["phases"]] == ["start", "enqueue", "tracking", "verify", "end-wait", "merge"]
    assert data["failures"] == [] and len(data["slowest"]) == len(jobs)
    # Each task x model with its merged log's metrics (a setting run: under its policy).
    manifest = Manifest.from_json((run_dir / "manifest.json").read_text())
    (merged,) = (run_dir / "merged").glob("*.eval")
    log = read_eval_log(str(merged), header_only=True)
    assert log.results is not None and manifest.policy
    want = {s.name: {m: v.value for m, v in s.metrics.items()} for s in log.results.scores}
    got = [(r["task"], r["model"], r["policy"], r["status"], r["log"], r["metrics"]) for r in data["results"]]
    assert got == [(log.eval.task, log.eval.model, manifest.policy, "success", "merged/" + merged.name, want)] and want
    html = page.read_text()
    assert "<h2>Results</h2>" in html and f"{log.eval.task} \u00b7 {log.eval.model} \u00b7 policy" in html
    assert not re.search(r"<script[^>]*\bsrc=", html)  # plotly.js is inlined: nothing to fetch
    assert all(f'id="{name}"' in html for name in ("timeline", "throughput", "cost"))
    assert html.count("Plotly.newPlot") == 3


@pytest.mark.e2e
def test_report_command_writes_the_report_again_from_the_run_directory(local_run, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ct_fleet.cli.main import cli

    runs = copy_of(local_run, tmp_path)
    run_dir = fleet_dir(runs)
    before = json.loads((run_dir / "report.json").read_text())
    (run_dir / "report.json").unlink()
    (run_dir / "report.html").unlink()
    env = {"CT_FLEET_RUNS": str(runs)}
    result = CliRunner().invoke(cli, ["report", run_dir.name], env=env)
    assert result.exit_code == 0, result.output
    assert f"report: {run_dir / 'report.html'}" in " ".join(result.output.split())
    after = json.loads((run_dir / "report.json").read_text())
    assert after["results"] == before["results"]
    assert {**after, "generated_at": 0} == {**before, "generated_at": 0}
    (run_dir / "attempts.jsonl").unlink()
    result = CliRunner().invoke(cli, ["report", run_dir.name], env=env)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "has no job reports yet" in result.stderr


@pytest.mark.e2e
def test_a_headless_browser_draws_the_report_from_disk_offline(local_run, tmp_path: Path) -> None:
    """Debian's chromium (bin/test installs it) with every host unresolvable and a dead proxy:
    the page must draw its charts from what it holds."""
    import shutil

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium (bin/test installs Debian's)")
    runs, code, out, err = local_run
    assert code == 0, out + err
    run_dir = fleet_dir(runs)
    browser = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=10000",
        "--window-size=1400,2400",
    ]
    url = (run_dir / "report.html").as_uri()
    dom = subprocess.run([*browser, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    assert dom.count('class="main-svg"') >= 3  # plotly.js ran and drew the three figures
    timeline = dom[dom.index('id="timeline"') : dom.index('id="throughput"')]
    bars = len(json.loads((run_dir / "report.json").read_text())["bars"])
    assert timeline.count('class="point"') >= bars  # every job's bar (and the workers' boot phases)
    shot = tmp_path / "report.png"
    subprocess.run([*browser, f"--screenshot={shot}", url], capture_output=True, timeout=180, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _live_merges(run_dir: Path) -> list[dict]:
    path = run_dir / run_layout.LIVE_MERGES
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.e2e
def test_live_merges_during_the_run_failed_never_and_the_end_replaced_them(local_run) -> None:
    runs, code, out, err = local_run
    assert code == 0, out + err
    run_dir = fleet_dir(runs)
    assert [m for m in _live_merges(run_dir) if "error" in m] == []
    (merged,) = (run_dir / "merged").glob("*.eval")
    assert read_eval_log(str(merged), header_only=True).status == "success"
    assert not list((run_dir / "merged").glob(".*.tmp"))  # written whole, renamed into place


@pytest.mark.e2e
def test_merged_holds_the_results_so_far_while_the_run_goes_on(local_run, tmp_path: Path) -> None:
    """LiveMerge on a copy of the run: every other result, then all; each merge a log Inspect
    reads, marked started, with exactly the samples that had arrived. The end's merge then
    tops up the same spool, and writes what a merge from scratch writes, byte for byte,
    though the results came out of path order."""
    run_dir = fleet_dir(copy_of(local_run, tmp_path))
    shutil.rmtree(run_dir / "merged")
    (run_dir / run_layout.LIVE_MERGES).unlink(missing_ok=True)
    held = tmp_path / "held"
    held.mkdir()
    logs = run_layout.job_logs(run_dir)
    for log in logs[::2]:
        log.rename(held / log.name)
    manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())

    def merged_after(count: int) -> EvalLog:
        assert wait_for(lambda: len(_live_merges(run_dir)) >= count, timeout=120), f"no live merge {count}"
        (path,) = (run_dir / "merged").glob("*.eval")
        return read_eval_log(str(path))

    with FleetMerge(manifest, run_dir) as fleet_merge:
        with LiveMerge(fleet_merge, interval=1):
            first = merged_after(1)
            assert first.status == "started" and first.error is None
            assert len(first.samples or []) == len(logs[1::2]) == _live_merges(run_dir)[0]["samples"]
            for log in held.iterdir():
                log.rename(run_dir / "jobs" / log.name)
            second = merged_after(2)
        assert second.status == "started" and len(second.samples or []) == len(logs)
        assert sorted((str(s.id), s.epoch) for s in second.samples or []) == sorted(merged_pairs(local_run[0]))
        (final,) = fleet_merge.merge()
    (scratch,) = merge_fleet(manifest, run_dir, tmp_path / "scratch")
    assert final.status == scratch.status == "success"
    assert final.path.read_bytes() == scratch.path.read_bytes()


PAD_MB = 8  # per sample: the merge then writes ~50 MB, long enough (~0.3 s) to be caught mid-write


def _pad_results(run_dir: Path) -> None:
    """Each result rewritten by Inspect with a large incompressible metadata value, so the
    merge's write (sample bytes copied, then fsync) lasts long enough to be caught."""
    for path in run_layout.job_logs(run_dir):
        as_eval = path.with_suffix(".eval")  # Inspect reads and writes logs by their suffix
        path.replace(as_eval)
        log = read_eval_log(str(as_eval))
        (sample,) = log.samples or []
        noise = os.urandom(PAD_MB * 2**20 * 3 // 4)  # PAD_MB once in base64
        sample.metadata = {**sample.metadata, "padding": base64.b64encode(noise).decode()}
        write_eval_log(log, as_eval)
        as_eval.replace(path)


def _written_in(proc: psutil.Process, where: Path) -> Path | None:
    """A file under `where` that proc holds open for writing: it is mid-write."""
    try:
        files = proc.open_files()
    except psutil.NoSuchProcess:
        raise AssertionError("the merge ended before it was seen writing (a larger PAD_MB writes longer)") from None
    return next((Path(f.path) for f in files if Path(f.path).parent == where and f.mode != "r"), None)


def _merge(runs: Path, run_dir: Path) -> Run:
    """`ct-fleet merge RUN_DIR`: the fleet's merge_fleet, as at the end of a run (a rerun of
    `ct-fleet eval` with nothing left to run merges the same way, but resumes only on the
    same code: other work in this checkout would make it a new fleet)."""
    return launch(["merge", str(run_dir)], env=env_for(runs))


@pytest.mark.faults
def test_a_sigkill_mid_merge_then_a_rerun_leaves_a_whole_readable_log(local_run, tmp_path: Path) -> None:
    """A merge SIGKILLed while it writes merged/: merged/ holds no log Inspect cannot read
    (the last whole one stays); merging again leaves the whole log and no temp file."""
    runs = copy_of(local_run, tmp_path)
    run_dir = fleet_dir(runs)
    merged_dir = run_dir / run_layout.MERGED
    _pad_results(run_dir)
    proc = _merge(runs, run_dir)
    try:
        merger = psutil.Process(proc.pid)
        writing = wait_for(lambda: _written_in(merger, merged_dir), timeout=300, every=0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert writing.exists()  # killed mid-write: what it was writing is still there
    logs = sorted(merged_dir.glob("*.eval"))
    assert writing not in logs, f"{writing.name} was being written in place"
    assert [p.name for p in logs] == ["toyarena.eval"]
    left = read_eval_log(str(logs[0]))  # reads in full: the last whole log, from before the kill
    assert len(left.samples or []) == 8 and not any("padding" in (s.metadata or {}) for s in left.samples or [])
    code, out, err = finish(_merge(runs, run_dir))
    assert code == 0, out + err
    assert [p.name for p in merged_dir.iterdir()] == ["toyarena.eval"]  # no temp file left
    log = read_eval_log(str(merged_dir / "toyarena.eval"))
    assert log.status == "success" and len(log.samples or []) == 8
    assert all("padding" in (sample.metadata or {}) for sample in log.samples or [])  # the merge of now
