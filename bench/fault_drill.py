"""Fault drill: one fleet of at least 100 jobs on the embedded cloud while workers are
killed with SIGKILL mid-job, and some jobs crash on their first attempt.

Reports jobs, kills, redeliveries, duplicates seen and dropped, dead-lettered jobs and
jobs lost (merged once + dead-lettered must equal all jobs: lost must be 0).

    .venv/bin/python bench/fault_drill.py [--epochs 4] [--kills 6] [--quick]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from inspect_ai.log import read_eval_log
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]


def workers_under(runs: Path, needle: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(runs) in proc.cwd() and needle in (proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4, help="medium has 27 tasks: 4 epochs = 108 jobs")
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--every", type=float, default=12.0, help="seconds between kills")
    parser.add_argument("--max-receives", type=int, default=5, help="deliveries before the DLQ (each kill costs one)")
    parser.add_argument("--quick", action="store_true", help="smoke x 3 epochs, 2 kills")
    args = parser.parse_args()
    task_file, epochs, kills_wanted = ("smoke", 3, 2) if args.quick else ("medium", args.epochs, args.kills)
    runs = Path(tempfile.mkdtemp(prefix="ct-fault-drill-"))
    env = {
        **os.environ,
        "CT_FLEET_RUNS": str(runs),
        "CT_FLEET_DOTENV": str(runs / ".env"),
        "CT_FAULT_DIR": str(runs / "faults"),
        "CT_FAULT_CRASH": "web:fix_login,ops:enable_tls",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    cmd = [
        str(REPO / "bin" / "ct-fleet"),
        "eval",
        "--task-file",
        task_file,
        "--epochs",
        str(epochs),
        "--policy",
        "tests.testkit.fault_policies:crash_once",
        # The fleet, not Docker: Inspect's local sandbox (bench/sandbox.py measures Docker).
        "-T",
        "sandbox=local",
        "--ec2-arg",
        "visibility_timeout=8",
        "--ec2-arg",
        "heartbeat_interval=4",
        "--ec2-arg",
        "max_replacements=50",
        "--ec2-arg",
        "idle_timeout=4",
        "--ec2-arg",
        "retry_backoff=1",
        "--ec2-arg",
        "concurrency_per_worker=3",
        "--ec2-arg",
        f"max_receive_count={args.max_receives}",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kills = 0
    while proc.poll() is None and kills < kills_wanted:
        time.sleep(args.every)
        if workers_under(runs, "ct_fleet.worker.runner"):
            victims = workers_under(runs, "ct_fleet.worker")
            if victims:
                victims[0].send_signal(signal.SIGKILL)
                kills += 1
    out, err = proc.communicate()
    elapsed = time.monotonic() - start
    flat = " ".join(out.split())
    fleet_dir = next(p for p in runs.iterdir() if (p / "manifest.json").exists())
    jobs = int(re.search(r"(\d+) jobs \(", flat).group(1))
    merged = list((fleet_dir / "merged").glob("*.eval"))
    pairs = [(s.id, s.epoch) for s in read_eval_log(str(merged[0])).samples or []] if merged else []
    dead = len(re.findall(r"bin/ct-fleet run-job", out))
    figures = {
        "jobs": jobs,
        "kills (SIGKILL of a worker mid-job)": kills,
        "first-attempt crashes": len(list((runs / "faults").glob("*.crashed"))),
        "attempts reported": int(re.search(r"attempts (\d+)", flat).group(1)),
        "redeliveries": int(re.search(r"redeliveries (\d+)", flat).group(1)),
        "duplicates seen and dropped": int(re.search(r"duplicates dropped (\d+)", flat).group(1)),
        "samples in the merged run": len(pairs),
        "duplicate (sample, epoch) in the merged run": len(pairs) - len(set(pairs)),
        "dead-lettered": dead,
        "lost": jobs - len(set(pairs)) - dead,
        "wall seconds": round(elapsed),
        "exit status": proc.returncode,
    }
    table = Table(title=f"fault drill: {task_file} x {epochs} epochs")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, str(value))
    Console().print(table)
    # The invariant: every job once in the merged run or in the dead-letter report.
    ok = figures["lost"] == 0 and figures["duplicate (sample, epoch) in the merged run"] == 0
    print(
        f"fault_drill: {jobs} jobs, {kills} kills, {figures['redeliveries']} redeliveries, "
        f"{figures['duplicates seen and dropped']} duplicates dropped, {figures['lost']} lost: {'OK' if ok else 'FAILED'}"
    )
    if dead or not ok:
        print(out[-4000:])
        print(err[-3000:], file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
