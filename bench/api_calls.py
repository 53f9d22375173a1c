#!/usr/bin/env python
"""api_calls: AWS API calls per job made by the controller and by the workers.

Runs the real CLI (`bin/ct-fleet eval`) on the embedded cloud with N command jobs
(smoke's 4 samples x N/4 epochs). Each job is `sleep 0` plus copying a pre-generated,
relabelled one-sample .eval (split out of one real toyarena eval) to $CT_OUTPUT, so the
run measures the fleet machinery, not Inspect. Every boto3 call of every process is
counted through CT_FLEET_API_LOG (ct_fleet.aws.client), split by role and call type.

Target: controller control-plane calls (SQS, EC2, SSM, S3 other than result downloads)
at most 0.35 per job. Result transfer (one GetObject per result, which the local merge
needs) is reported separately. The naive controller beside it is computed from the same
run: the same fixed and polling calls, plus one SendMessage per job and one ReceiveMessage
+ one DeleteMessage per job's done report (3 x jobs; heartbeats not counted).

    .venv/bin/python bench/api_calls.py            # 1,000 jobs, 2 workers x 8 slots
    .venv/bin/python bench/api_calls.py --quick    # 100 jobs
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import time

import _common as c
from rich.console import Console
from rich.table import Table

TARGET = 0.35
PER_MESSAGE = ("sqs:SendMessageBatch", "sqs:ReceiveMessage", "sqs:DeleteMessageBatch")
POLLING = ("ec2:DescribeInstances", "sqs:GetQueueAttributes")


def classify(call: str) -> str:
    if call in PER_MESSAGE:
        return "per message (batched)"
    if call in POLLING:
        return "polling (per 5 s)"
    return "setup / teardown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="100 jobs")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (runs, API log, pool)")
    args = ap.parse_args()
    jobs_wanted = 100 if args.quick else args.jobs
    epochs = math.ceil(jobs_wanted / len(c.SMOKE_IDS))
    jobs = epochs * len(c.SMOKE_IDS)
    console = Console(width=max(Console().width, 130))

    tmp = c.bench_tmp("api")
    pool, runs, api_log = tmp / "pool", tmp / "runs", tmp / "api.log"
    t0 = time.monotonic()
    c.make_pool(pool, c.SMOKE_IDS, epochs)
    console.print(f"[dim]pool of {jobs} relabelled one-sample logs in {time.monotonic() - t0:.1f}s: {pool}[/]")

    command = f'sleep 0; cp "{pool}/${{CT_SAMPLE_ID}}__${{CT_EPOCH}}.eval" "$CT_OUTPUT"'
    argv = [
        str(c.REPO / "bin" / "ct-fleet"),
        "eval",
        "--task-file",
        "smoke",
        "--policy",
        "honest",
        "--epochs",
        str(epochs),
        # Command jobs run no sandbox: no Docker to ready for them.
        "-T",
        "sandbox=local",
        "--command",
        command,
        "--ec2-arg",
        f"max_workers={args.workers}",
        "--ec2-arg",
        f"concurrency_per_worker={args.concurrency}",
    ]
    env = {**os.environ, "CT_FLEET_RUNS": str(runs), "CT_FLEET_API_LOG": str(api_log)}
    for key in [k for k in env if k.startswith("AWS_")]:
        del env[key]
    t0 = time.monotonic()
    with open(tmp / "cli.log", "w") as out:
        rc = subprocess.run(argv, cwd=c.REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    if rc != 0:
        console.print((tmp / "cli.log").read_text()[-3000:])
        console.print(f"[red]ct-fleet eval exited {rc}; see {tmp}[/]")
        return 1
    run_dir = next(p for p in runs.iterdir() if p.is_dir())
    results = len(list((run_dir / "jobs").glob("*.evaljob")))

    counts = c.api_counts(api_log)
    ctl = {call: n for (role, call), n in counts.items() if role == "controller"}
    wkr = {call: n for (role, call), n in counts.items() if role == "worker"}
    # Result downloads are the GetObjects beyond the manifest/log reads: one per result file.
    gets = ctl.pop("s3:GetObject", 0)
    result_gets = min(gets, results)
    if gets - result_gets:
        ctl["s3:GetObject (manifest)"] = gets - result_gets

    table = Table(title=f"AWS API calls for {jobs} command jobs ({args.workers} workers x {args.concurrency} slots)")
    for col in ("call", "class (controller side)", "controller", "ctl / job", "workers", "wkr / job"):
        table.add_column(col, justify="left" if col.startswith(("call", "class")) else "right")
    for call in sorted(set(ctl) | set(wkr), key=lambda k: (classify(k), -ctl.get(k, 0), k)):
        n, w = ctl.get(call, 0), wkr.get(call, 0)
        table.add_row(
            call,
            classify(call),
            str(n or ""),
            f"{n / jobs:.3f}" if n else "",
            str(w or ""),
            f"{w / jobs:.3f}" if w else "",
        )
    control = sum(ctl.values())
    table.add_section()
    table.add_row("controller control plane", "", str(control), f"{control / jobs:.3f}", "", "")
    table.add_row("s3:GetObject (results)", "result transfer", str(result_gets), f"{result_gets / jobs:.3f}", "", "")
    workers_total = sum(wkr.values())
    table.add_row("workers, all calls", "", "", "", str(workers_total), f"{workers_total / jobs:.3f}")

    batched = sum(ctl.get(k, 0) for k in PER_MESSAGE)
    naive = control - batched + 3 * jobs
    table.add_section()
    table.add_row("naive controller control plane", "computed", str(naive), f"{naive / jobs:.3f}", "", "")
    console.print(table)
    per_msg = {k: ctl.get(k, 0) for k in PER_MESSAGE}
    deletes = ctl.get("sqs:DeleteMessageBatch", 0)
    polling = sum(ctl.get(k, 0) for k in POLLING)
    console.print(
        f"done queue: {jobs / max(deletes, 1):.1f} jobs reported per receive+delete; "
        f"polling {polling} calls over {wall:.0f}s = {polling / wall:.2f} calls/s (time-bound, not job-bound)"
    )
    console.print(
        f"controller per-message calls {per_msg}; naive = {control} - {batched} + 3 x {jobs} "
        f"(one send, one receive, one delete per job)"
    )
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    ok = control / jobs <= TARGET and results == jobs
    print(
        f"api_calls: {jobs} jobs in {wall:.0f}s: controller {control / jobs:.3f} control-plane calls/job "
        f"(target <= {TARGET}: {'MET' if control / jobs <= TARGET else 'MISSED'}) + {result_gets / jobs:.2f} result GetObject/job; "
        f"naive controller {naive / jobs:.2f}/job ({naive / max(control, 1):.1f}x ours); "
        f"workers {workers_total / jobs:.2f} calls/job; {results}/{jobs} results"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
