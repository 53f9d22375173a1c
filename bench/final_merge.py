#!/usr/bin/env python
"""final_merge: the merge after a run's last result, when a live merge has kept up.

A fleet's run directory at N results: a manifest of one task (N / 100 sample ids x 100
epochs) and one one-sample result per job in jobs/<job_id>.evaljob, each cloned from one
real toyarena eval the way bench/merge.py makes its inputs (its own eval, run and task
ids, creation time and stats). Everything runs in this process, inspect_ai imported first
(a controller that live-merged has imported it long before its end).

Two ways to the finished merged log, alternated, each --trials times:
- kept up: the real LiveMerge thread (interval 1 s) runs while N - 1 results are in jobs/,
  until it has merged them all (its line in live-merges.jsonl); then the last result lands
  and the end of run does what FleetRun does: leave LiveMerge (which waits for a merge in
  progress) and merge with the same FleetMerge, whose spool holds the N - 1 already. Timed
  from the last result's landing to that merge's return.
- baseline: merge_fleet from scratch (merged/ empty), the end of run without a live merge.

Target: kept up <= 2 s at N = 10,000 (the issue's "the end of run only completes it").

    .venv/bin/python bench/final_merge.py              # N = 10,000
    .venv/bin/python bench/final_merge.py --quick      # N = 2,000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import _common as c

from ct_fleet.controller.fleet import merging
from ct_fleet.controller.fleet.live_merge import LiveMerge
from ct_fleet.protocol import Manifest, ManifestJob, ManifestTask, run_layout

EPOCHS = 100
TARGET_SECONDS = 2.0
TASK_KEY = "bench0task0key00"


def _job_id(sample_id: str, epoch: int) -> str:
    return hashlib.sha256(f"{sample_id}/{epoch}".encode()).hexdigest()[:16]


def _pairs(n: int) -> list[tuple[str, int]]:
    keys = sorted(c.templates())
    return [(f"{keys[k % len(keys)]}-{k:06d}", e) for k in range(n // EPOCHS) for e in range(1, EPOCHS + 1)]


def _gen(args: tuple[Path, list[tuple[str, int]]]) -> int:
    out_dir, pairs = args
    tpl = c.templates()
    for sample_id, epoch in pairs:
        base = sample_id.rsplit("-", 1)[0]
        c.clone(tpl[base], out_dir / f"{_job_id(sample_id, epoch)}{run_layout.JOB_LOG_SUFFIX}", sample_id, epoch)
    return len(pairs)


def make_fleet(run_dir: Path, n: int) -> Manifest:
    """runs/<fleet>/ with its manifest and n results in jobs/."""
    pairs = _pairs(n)
    ids: list[str | int] = list(dict.fromkeys(sample_id for sample_id, _ in pairs))
    task = ManifestTask(
        key=TASK_KEY, name="toyarena", task_spec=c.TASK_SPEC, task_args={"policy": "honest"}, sample_ids=ids
    )
    jobs = [ManifestJob(_job_id(s, e), TASK_KEY, s, e) for s, e in pairs]
    manifest = Manifest(
        fleet_id=run_dir.name, model="mockllm/model", epochs=EPOCHS, code_sha="bench", tasks=[task], jobs=jobs
    )
    jobs_dir = run_layout.jobs_dir(run_dir)
    jobs_dir.mkdir(parents=True)
    (run_dir / run_layout.MANIFEST).write_text(manifest.to_json())
    c.templates()  # the real eval runs once, before forking
    chunks = [(jobs_dir, pairs[i : i + 1000]) for i in range(0, len(pairs), 1000)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        assert sum(pool.map(_gen, chunks)) == n
    return manifest


def _reset(run_dir: Path) -> None:
    shutil.rmtree(run_dir / run_layout.MERGED, ignore_errors=True)
    (run_dir / run_layout.LIVE_MERGES).unlink(missing_ok=True)


def _live_merged(run_dir: Path) -> int:
    path = run_dir / run_layout.LIVE_MERGES
    lines = path.read_text().splitlines() if path.exists() else []
    return max((int(json.loads(line).get("samples", 0)) for line in lines), default=0)


def _wait(condition: Callable[[], bool], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the live merge never caught up")
        time.sleep(0.05)


def kept_up(manifest: Manifest, run_dir: Path, last: Path, held: Path) -> tuple[float, float]:
    """(seconds from the last result to the finished log, the last live merge's seconds);
    the last result waits at `held` until the live merge has merged all the others."""
    _reset(run_dir)
    n = len(manifest.jobs)
    with merging.FleetMerge(manifest, run_dir) as fleet_merge:  # as FleetRun holds it across the run
        with LiveMerge(fleet_merge, interval=1):  # as FleetRun._drive around the tracking
            _wait(lambda: _live_merged(run_dir) >= n - 1)
            held.rename(last)  # the last result lands
            began = time.monotonic()
        # Left: the live merge stopped (after a merge in progress); then FleetRun._run's merge.
        merged = fleet_merge.merge()
        took = time.monotonic() - began
    assert merged[0].samples_present == n and merged[0].status == "success", merged[0]
    line = json.loads((run_dir / run_layout.LIVE_MERGES).read_text().splitlines()[-1])
    return took, float(line["seconds"])


def from_scratch(manifest: Manifest, run_dir: Path) -> float:
    _reset(run_dir)
    began = time.monotonic()
    merged = merging.merge_fleet(manifest, run_dir)
    took = time.monotonic() - began
    assert merged[0].samples_present == len(manifest.jobs), merged[0]
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="2,000 results")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    n = 2_000 if args.quick else args.results
    tmp = c.bench_tmp("final-merge")
    try:
        run_dir = tmp / "runs" / "bench0fleet0"
        began = time.monotonic()
        manifest = make_fleet(run_dir, n)
        print(f"{n:,} results generated in {time.monotonic() - began:.0f} s ({c.machine()})", flush=True)
        from ct_fleet import merge  # noqa: F401  (inspect_ai's import: seconds, never part of a timing)

        last = run_layout.job_log(run_dir, manifest.jobs[-1].job_id)
        held = tmp / last.name
        from_scratch(manifest, run_dir)  # warm-up: the page cache holds every input, as at a run's end
        finals, lives, scratch = [], [], []
        for trial in range(args.trials):
            last.rename(held)  # every result but the last is in
            final, live = kept_up(manifest, run_dir, last, held)
            base = from_scratch(manifest, run_dir)
            finals.append(final)
            lives.append(live)
            scratch.append(base)
            print(f"trial {trial + 1}: kept up {final:.2f} s (its live merge {live:.2f} s); from scratch {base:.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    final, base = statistics.median(finals), statistics.median(scratch)
    verdict = "MET" if final <= TARGET_SECONDS else f"MISSED by {final - TARGET_SECONDS:.2f} s"
    print(
        f"final_merge: {n:,} results, merge after the last result {final:.2f} s (median of {args.trials}) "
        f"with a live merge kept up, {base:.2f} s from scratch ({final / base:.2f}x); "
        f"target <= {TARGET_SECONDS:.0f} s {verdict}"
    )
    return 0 if final <= TARGET_SECONDS else 3


if __name__ == "__main__":
    sys.exit(main())
