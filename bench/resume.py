#!/usr/bin/env python
"""resume: planning the resume of a 100,000-job fleet with 60,000 results already in S3.

Starts its own moto server (ct_fleet.moto_server.MotoServer), puts 60,000 small result
objects under {fleet_id}/{job_id}.eval (plus the manifest and 20 bootstrap logs under the
same prefix, which the listing pages through too) with 16 threads, then times
ct_fleet.store.list_result_job_ids and counts its ListObjectsV2 calls with a botocore
event hook on the client it is given. Target: at most 101 list calls.

After planning, the controller downloads every result it does not hold locally (one
GetObject each, 8 threads, ct_fleet.store.download_result). That part is measured on a
sample of real one-sample .eval bodies and extrapolated to all 60,000.

    .venv/bin/python bench/resume.py            # 100,000 jobs, 60,000 results
    .venv/bin/python bench/resume.py --quick    # 10,000 jobs, 6,000 results
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import _common as c
from rich.console import Console
from rich.table import Table

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer
from ct_fleet.protocol import log_key, manifest_key, result_key
from ct_fleet.services import session as aws
from ct_fleet.services import store

TARGET_LISTS = 101
BUCKET = "lb-fleet-results-migrated"
GET_PRICE_PER_1000 = 0.0004  # USD, S3 Standard GET (us-east-1)
EGRESS_PER_GB = 0.09  # USD, data transfer out to the internet (first 10 TB)


def job_ids(n: int) -> list[str]:
    return [hashlib.sha256(f"bench-job-{i}".encode()).hexdigest()[:16] for i in range(n)]


class CallCounter:
    def __init__(self, client: object, operation: str) -> None:
        self.n = 0
        self._lock = threading.Lock()
        client.meta.events.register(f"before-call.s3.{operation}", self._hit)  # type: ignore[attr-defined]

    def _hit(self, **_: object) -> None:
        with self._lock:
            self.n += 1


def put_all(keys: list[str], body: bytes, threads: int) -> float:
    s3 = aws.client("s3")
    t0 = time.monotonic()

    def put(chunk: list[str]) -> None:
        for key in chunk:
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(put, [keys[i::threads] for i in range(threads)]))
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--results", type=int, default=60_000)
    ap.add_argument("--threads", type=int, default=16, help="threads putting the results")
    ap.add_argument("--sample", type=int, default=1000, help="real results downloaded to time GetObject")
    ap.add_argument("--quick", action="store_true", help="10,000 jobs, 6,000 results, 300 downloads")
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.results, args.sample = 10_000, 6_000, 300
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("resume")
    server = MotoServer(log_path=tmp / "moto.log").start()
    try:
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "CT_FLEET_API_LOG"):
            os.environ.pop(key, None)
        os.environ.update(
            AWS_ENDPOINT_URL=server.endpoint_url,
            AWS_ACCESS_KEY_ID=EMBEDDED_ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=EMBEDDED_SECRET_KEY,
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
        )
        aws._session.cache_clear()
        s3 = aws.client("s3")
        store.ensure_bucket(s3, BUCKET, create=True)
        fleet_id = "benchresume0"
        jobs = job_ids(args.jobs)
        done = jobs[:: max(1, args.jobs // args.results)][: args.results]
        extra = [manifest_key(fleet_id)] + [log_key(fleet_id, f"i-{k:017x}") for k in range(20)]
        put_s = put_all([result_key(fleet_id, j) for j in done] + extra, b"x" * 64, args.threads)
        console.print(
            f"[dim]put {len(done) + len(extra):,} objects in {put_s:.0f}s ({(len(done) + len(extra)) / put_s:.0f}/s, {args.threads} threads)[/]"
        )

        # -- planning: what the controller does first on a resume ---------------------
        lister = aws.client("s3")
        lists = CallCounter(lister, "ListObjectsV2")
        t0 = time.monotonic()
        found = store.list_result_job_ids(lister, BUCKET, fleet_id)
        list_s = time.monotonic() - t0
        t0 = time.monotonic()
        to_fetch = found & set(jobs)
        pending = [j for j in jobs if j not in to_fetch]
        plan_s = time.monotonic() - t0
        assert len(to_fetch) == len(done), (len(to_fetch), len(done))

        # -- downloads: one GetObject per result, 8 threads like Controller.downloads ------
        sample_fleet = "benchresume1"
        tpl = c.templates()
        real = tmp / "one.eval"
        c.clone(tpl[c.SMOKE_IDS[0]], real)
        body = real.read_bytes()
        sample_jobs = jobs[: args.sample]
        put_all([result_key(sample_fleet, j) for j in sample_jobs], body, args.threads)
        getter = aws.client("s3")
        gets = CallCounter(getter, "GetObject")
        heads = CallCounter(getter, "HeadObject")
        dest = tmp / "results"
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            ok = list(
                pool.map(
                    lambda j: store.download_result(getter, BUCKET, result_key(sample_fleet, j), dest / f"{j}.eval"),
                    sample_jobs,
                )
            )
        get_s = time.monotonic() - t0
        assert all(ok), "a downloaded result was not a finished log"
    finally:
        server.stop()

    per_get = get_s / args.sample
    fetch_all_s = per_get * len(to_fetch)
    gb = len(to_fetch) * len(body) / 2**30
    usd = len(to_fetch) / 1000 * GET_PRICE_PER_1000
    table = Table(title=f"resume planning: {args.jobs:,} jobs, {len(done):,} results in S3 (embedded moto)")
    for col in ("step", "calls", "seconds", "note"):
        table.add_column(col, justify="left" if col in ("step", "note") else "right")
    table.add_row(
        "seed: put results + manifest + logs",
        f"{len(done) + len(extra):,}",
        f"{put_s:.0f}",
        f"{args.threads} threads, {(len(done) + len(extra)) / put_s:.0f} puts/s (setup, not measured code)",
    )
    table.add_row(
        "list_result_job_ids",
        f"{lists.n} ListObjectsV2",
        f"{list_s:.2f}",
        f"{len(found):,} result ids; target <= {TARGET_LISTS} calls",
    )
    table.add_row("intersect with jobs, pending list", "0", f"{plan_s:.3f}", f"{len(pending):,} jobs to enqueue")
    table.add_row(
        f"download sample ({args.sample} x {len(body) / 1024:.1f} KB)",
        f"{gets.n} GetObject + {heads.n} HeadObject",
        f"{get_s:.1f}",
        f"{args.sample / get_s:.0f}/s with 8 threads, incl. is_finished check",
    )
    table.add_row(
        f"download all {len(to_fetch):,} (extrapolated)",
        f"{len(to_fetch):,} GetObject",
        f"{fetch_all_s:.0f}",
        f"{gb * 1024:.0f} MB; on AWS ${usd:.3f} in GETs + ${gb * EGRESS_PER_GB:.3f} egress outside AWS",
    )
    console.print(table)
    console.print(f"[dim]{c.machine()}; temp dir {tmp} (removed)[/]")
    met = lists.n <= TARGET_LISTS
    print(
        f"resume: {args.jobs:,} jobs / {len(done):,} results: list_result_job_ids made {lists.n} list calls in {list_s:.2f}s "
        f"(target <= {TARGET_LISTS}: {'MET' if met else 'MISSED'}); then {len(to_fetch):,} GetObject downloads "
        f"~{fetch_all_s:.0f}s on moto at {args.sample / get_s:.0f}/s (${usd:.3f} of GETs on AWS)"
    )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main())
