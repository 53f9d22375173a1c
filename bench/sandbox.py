"""The per-sample cost of toyarena's Docker sandbox, beside the per-job overhead.

    .venv/bin/python bench/sandbox.py [--reps N] [--quick] [--cold]

1. compose: per environment and repetition, what Inspect's docker sandbox does around a
   sample, timed by phase with the docker CLI: `compose up --detach --wait` of the
   environment's compose file, the first `compose exec` (a sample's first command), and
   `compose down --volumes` (teardown).
2. jobs: one fleet job as a worker runs it (`python -m ct_fleet.worker.runner MESSAGE OUT`:
   Python and Inspect start-up, the task, the sample, the log), wall time, with
   `-T sandbox=docker` and with `-T sandbox=local`, interleaved. The local job is the
   per-job overhead a job pays with no container; the difference is what Docker adds per
   sample inside Inspect (its prerequisite checks, compose config, up, exec, down).
3. --cold: bin/build-images on an empty private dockerd with an empty rootfs cache (the
   first run's debootstrap, import and builds), then again (the warm run: all reused).

No target: issue 12 asks for the figures. The summary line gives the medians. The
fleet's own dispatch overhead per job (queue to slot to report) is bench/makespan.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from _common import PYTHON, REPO, bench_tmp, machine
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(REPO / "examples" / "settings"))
from toyarena.catalog import ENVIRONMENTS
from toyarena.compose import compose_file

from ct_fleet.protocol import WorkMessage

console = Console(highlight=False)
SAMPLES = {"web": "web:fix_login", "pipeline": "pipeline:dedupe_rows", "ops": "ops:enable_tls"}


def run(*cmd: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> float:
    """Seconds a command takes; it must succeed."""
    start = time.perf_counter()
    subprocess.run(list(cmd), check=True, capture_output=True, env=env, cwd=cwd, timeout=1800)
    return time.perf_counter() - start


def compose_cycle(env: str) -> dict[str, float]:
    file = str(compose_file(env))
    project = f"ct-bench-{env}-{uuid.uuid4().hex[:6]}"
    base = ["docker", "compose", "--progress", "quiet", "-p", project, "-f", file]
    try:
        up = run(*base, "up", "--detach", "--wait")
        first = run(*base, "exec", "-T", "default", "true")
    finally:
        down = run(*base, "down", "--volumes")
    return {"up": up, "first exec": first, "up to first exec": up + first, "down": down}


def job_message(env: str, sandbox: str) -> str:
    return WorkMessage(
        fleet_id="bench",
        job_id=uuid.uuid4().hex[:16],
        sample_id=SAMPLES[env],
        epoch=1,
        task_spec="examples/settings/toyarena/task.py@toyarena",
        task_args={"policy": "honest", "sandbox": sandbox},
        model="mockllm/model",
        code_sha="bench",
        result_key="bench",
        time_limit=0,
    ).to_json()


def job(env: str, sandbox: str, out_dir: Path) -> float:
    out = out_dir / f"{uuid.uuid4().hex}.eval"
    pypath = os.pathsep.join([str(REPO / "lib"), str(REPO / "examples" / "settings"), str(REPO)])
    seconds = run(
        PYTHON,
        "-m",
        "ct_fleet.worker.runner",
        job_message(env, sandbox),
        str(out),
        env={**os.environ, "PYTHONPATH": pypath},
    )
    out.unlink()
    return seconds


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(title: str, rows: dict[str, list[float]]) -> Table:
    t = Table(title=title)
    for col in ("", "n", "median s", "min s", "max s"):
        t.add_column(col, justify="right" if col else "left")
    for name, values in rows.items():
        t.add_row(name, str(len(values)), f"{median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}")
    return t


def cold_build(tmp: Path) -> dict[str, float]:
    """bin/build-images on an empty private dockerd and rootfs cache, then again."""
    sock_dir = Path(f"/tmp/ct-bench-dockerd-{uuid.uuid4().hex[:6]}")
    sock_dir.mkdir()
    daemon = subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(sock_dir / "data"),
            "--exec-root",
            str(sock_dir / "exec"),
            "--pidfile",
            str(sock_dir / "pid"),
            "-H",
            f"unix://{sock_dir}/docker.sock",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock_dir}/docker.sock", "CT_FLEET_CACHE_DIR": str(tmp / "cache")}
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "info"], env=env, capture_output=True).returncode != 0:
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError("the private dockerd did not start")
            time.sleep(0.2)
        first = run(str(REPO / "bin" / "build-images"), "toyarena", env=env)
        second = run(str(REPO / "bin" / "build-images"), "toyarena", env=env)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(sock_dir, ignore_errors=True)
    return {"first build (debootstrap, import, 3 builds)": first, "second build (all reused)": second}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions per environment and sandbox (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 repetitions")
    parser.add_argument("--cold", action="store_true", help="also time a first image build (about 3 minutes)")
    args = parser.parse_args()
    reps = 2 if args.quick else args.reps
    console.print(f"bench sandbox: {machine()}, load {os.getloadavg()[0]:.1f}, {reps} reps per environment")
    subprocess.run([str(REPO / "bin" / "build-images"), "toyarena"], check=True, capture_output=True)
    tmp = bench_tmp("sandbox")
    try:
        phases: dict[str, list[float]] = {}
        jobs: dict[str, list[float]] = {"job, local sandbox": [], "job, docker sandbox": []}
        for _ in range(reps):
            for env in ENVIRONMENTS:
                for phase, seconds in compose_cycle(env).items():
                    phases.setdefault(phase, []).append(seconds)
                jobs["job, local sandbox"].append(job(env, "local", tmp))
                jobs["job, docker sandbox"].append(job(env, "docker", tmp))
        console.print(table("docker compose around one sample (CLI)", phases))
        console.print(table("one fleet job (ct_fleet.worker.runner), wall", jobs))
        local, docker = median(jobs["job, local sandbox"]), median(jobs["job, docker sandbox"])
        cold: dict[str, float] = cold_build(tmp) if args.cold else {}
        if cold:
            t = Table(title="image builds (private dockerd, empty caches)")
            t.add_column("")
            t.add_column("s", justify="right")
            for name, seconds in cold.items():
                t.add_row(name, f"{seconds:.1f}")
            console.print(t)
        summary = {
            "up_to_first_exec_s": round(median(phases["up to first exec"]), 2),
            "down_s": round(median(phases["down"]), 2),
            "job_local_s": round(local, 2),
            "job_docker_s": round(docker, 2),
            "docker_adds_per_job_s": round(docker - local, 2),
            **{k.split(" (")[0].replace(" ", "_") + "_s": round(v, 1) for k, v in cold.items()},
        }
        console.print(json.dumps(summary))
        console.print(
            f"sandbox: compose up to first exec {summary['up_to_first_exec_s']:.2f} s, down {summary['down_s']:.2f} s; "
            f"a job {local:.2f} s with the local sandbox, {docker:.2f} s with docker "
            f"(+{docker - local:.2f} s per sample) (no target)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
