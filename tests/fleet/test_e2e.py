"""`bin/ct-fleet eval` end to end on the embedded cloud, as a user runs it.

The smoke run is the README's first command: every sample in a Docker sandbox. Fleets that
are about the fleet, not the sandbox, run Inspect's local sandbox (test_local_run.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log

from ct_fleet.settings import load_setting
from testkit.fleet import SandboxWatch, docker_lines, run_cli

REPO = Path(__file__).resolve().parents[2]
CT_FLEET = str(REPO / "bin" / "ct-fleet")


def _env(runs: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    full_env = {**os.environ, "CT_FLEET_RUNS": str(runs), "CT_FLEET_DOTENV": str(runs / ".env"), **(env or {})}
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        full_env.pop(key, None)
    return full_env


def ct_fleet(
    runs: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 400
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CT_FLEET, *args], cwd=REPO, env=_env(runs, env), capture_output=True, text=True, timeout=timeout
    )


def moto_alive(runs: Path) -> list[int]:
    """Embedded moto servers started for runs under `runs` that are still running."""
    return [int(p.read_text()) for p in runs.glob("*/moto.pid") if psutil.pid_exists(int(p.read_text()))]


def processes_under(path: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            text = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["cwd"] or "")
        except psutil.Error:
            continue
        if str(path) in text:
            found.append(text)
    return found


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory, docker_images: list[str]):
    runs = tmp_path_factory.mktemp("runs")
    with SandboxWatch() as watch:
        proc = ct_fleet(runs, "eval", "--task-file", "smoke", "--policy", "honest", "--epochs", "3")
    return runs, proc, watch


@pytest.mark.e2e
def test_smoke_run_merges_every_sample_epoch_once(smoke_run):
    runs, proc, _ = smoke_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    assert len(list((run_dir / "jobs").glob("*.evaljob"))) == 12
    (merged,) = (run_dir / "merged").glob("*.eval")
    log = read_eval_log(str(merged))
    assert log.status == "success"
    assert log.eval.config.epochs == 3
    pairs = [(s.id, s.epoch) for s in log.samples or []]
    assert len(pairs) == 12 and len(set(pairs)) == 12
    assert {e for _, e in pairs} == {1, 2, 3}
    assert "results" in proc.stdout and "12/12" in proc.stdout
    assert {s.sandbox.type for s in log.samples or [] if s.sandbox} == {"docker"}
    assert all(s.sandbox for s in log.samples or [])
    assert "docker ready for 3 sandbox image(s)" in proc.stdout


@pytest.mark.e2e
def test_each_job_records_the_image_digests_it_ran(smoke_run, docker_images: list[str]):
    runs, proc, _ = smoke_run
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    ids = dict(zip(docker_images, docker_lines("image", "inspect", "--format", "{{.Id}}", *docker_images), strict=True))
    records = [json.loads(line) for line in (run_dir / "sandbox-images.jsonl").read_text().splitlines()]
    assert len({(r["sample_id"], r["epoch"]) for r in records}) == 12
    for record in records:
        env = record["sample_id"].split(":")[0]
        (image,) = record["images"]
        assert image["ref"] in docker_images and image["ref"].startswith(f"ct-fleet/toyarena-{env}:")
        assert image["id"] == ids[image["ref"]]


@pytest.mark.e2e
def test_smoke_metrics_equal_a_direct_run(smoke_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    runs, proc, _ = smoke_run
    assert proc.returncode == 0, proc.stderr
    (merged,) = next(p for p in runs.iterdir() if p.is_dir()).joinpath("merged").glob("*.eval")
    fleet_log = read_eval_log(str(merged))
    setting = load_setting()
    ids = list(dict.fromkeys(s.id for s in fleet_log.samples or []))
    monkeypatch.chdir(REPO)
    # The same sandbox as the fleet's (the task's default: Docker).
    (direct,) = inspect_eval(
        setting.task_spec,
        task_args={"policy": "honest"},
        model="mockllm/model",
        sample_id=ids,
        epochs=3,
        log_dir=str(tmp_path),
        display="none",
    )
    assert fleet_log.results and direct.results
    assert fleet_log.results.total_samples == direct.results.total_samples == 12
    assert fleet_log.results.completed_samples == direct.results.completed_samples
    got = {(s.name, m): v.value for s in fleet_log.results.scores for m, v in s.metrics.items()}
    want = {(s.name, m): v.value for s in direct.results.scores for m, v in s.metrics.items()}
    assert got.keys() == want.keys() and got
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-9), key


@pytest.mark.e2e
def test_smoke_run_leaves_nothing_running(smoke_run, docker_images: list[str]):
    runs, proc, watch = smoke_run
    assert proc.returncode == 0, proc.stderr
    assert list(runs.glob("*/moto.pid")) and moto_alive(runs) == []
    assert processes_under(runs) == []
    # Every job ran its own sandbox, and none of them is left: no container, network or
    # volume of any compose project the fleet ran.
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    assert len(watch.projects(run_dir)) >= 2, watch.seen
    assert watch.leftovers(run_dir) == {}
    # Nor was any image pruned: the next fleet runs the same ones.
    assert len(docker_lines("image", "inspect", "--format", "{{.Id}}", *docker_images)) == len(docker_images)


@pytest.mark.e2e
def test_rerun_resumes_without_running_anything(smoke_run):
    runs, first, _ = smoke_run
    assert first.returncode == 0, first.stderr
    again = ct_fleet(runs, "eval", "--task-file", "smoke", "--policy", "honest", "--epochs", "3")
    assert again.returncode == 0, again.stderr
    assert "12 jobs (12 already done), 0 workers" in " ".join(again.stdout.split())


BAD_INPUTS = [
    (["--task-file", "nope"], "unknown task set 'nope'"),
    (["--task-file", "{bad_yaml}"], "bad.yml:2: not valid YAML"),
    (["--task-file", "{bad_jsonl}"], "bad.jsonl:2: not valid JSON"),
    (["-e", "nowhere"], "unknown env 'nowhere'"),
    (["-e", "web", "-t", "fly"], "unknown main task 'fly'"),
    (["--task-file", "smoke", "--epochs", "0"], "--epochs must be at least 1"),
    (["--task-file", "smoke", "--policy", "nosuchmod_xyz:pol"], "neither tracked in this repo nor in an --extra-src"),
    (["--task-file", "smoke", "--policy", "sneaky"], "unknown policy 'sneaky'"),
    (["--task-file", "smoke", "--ec2-arg", "max_worker=2"], "unknown --ec2-arg 'max_worker'"),
    (["--task-file", "smoke", "--ec2-arg", "max_workers=two"], "expected a whole number"),
    (["-e", "toyarena:web", "-e", "ops"], "either prefix every -e"),
    (["--task-file", "smoke", "-T", "sandbox=vm"], "-T sandbox=docker or -T sandbox=local"),
    (["--task-file", "smoke", "-T", "sandbox"], "write -T key=value"),
    (["--task-file", "smoke", "-T", "policy=attack"], "choose the policy with --policy"),
]


# These two go through bin/ct-fleet itself (its venv check and Python start-up add no line);
# the rest are CLI processes forked from tests/testkit/cli_forker.py, 1.3 s of CPU less each.
THROUGH_BIN = ("unknown task set 'nope'", "bad.yml:2: not valid YAML")


@pytest.mark.parametrize("args,message", BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_launches_nothing(tmp_path: Path, args: list[str], message: str):
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "bad.yml").write_text("- env: web\n  main_task: fix: login\n")
    (tmp_path / "bad.jsonl").write_text('{"env": "web", "main_task": "fix_login"}\n{oops\n')
    args = [a.format(bad_yaml=tmp_path / "bad.yml", bad_jsonl=tmp_path / "bad.jsonl") for a in args]
    if message in THROUGH_BIN:
        proc = ct_fleet(runs, "eval", *args, timeout=120)
    else:
        proc = run_cli(["eval", *args], env=_env(runs), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(("ct-fleet:", "WARNING"))
    ]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], proc.stderr
    assert list(runs.iterdir()) == []  # no run directory: nothing archived, launched or uploaded


@pytest.mark.e2e
def test_merge_command_merges_a_directory(smoke_run, tmp_path: Path):
    runs, proc, _ = smoke_run
    assert proc.returncode == 0, proc.stderr
    results = next(p for p in runs.iterdir() if p.is_dir()) / "jobs"
    merged = ct_fleet(runs, "merge", str(results), "-o", str(tmp_path / "out"))
    assert merged.returncode == 0, merged.stderr
    (out,) = (tmp_path / "out").glob("*.eval")
    assert len(read_eval_log(str(out)).samples or []) == 12
    empty = tmp_path / "empty"
    empty.mkdir()
    none = ct_fleet(runs, "merge", str(empty))
    assert none.returncode == 2 and "no readable .eval files" in none.stderr
