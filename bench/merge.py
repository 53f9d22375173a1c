#!/usr/bin/env python
"""merge: the streaming merge's memory and speed, against today's code and a read-all merge.

Inputs are one-sample .eval files generated the way a fleet makes them: one real toyarena
eval split into one-sample logs, cloned under distinct (sample id, epoch) pairs, each with
its own eval, run and task ids, creation time and stats (ids x 100 epochs: 2,000 files =
20 ids; 100,000 = 1,000 ids). With `--job-log PATH` the inputs are copies of a real fleet
job log instead (runs/<fleet>/jobs/*.evaljob, e.g. from `bin/ct-fleet eval --task-file
smoke -T sandbox=local --epochs 1 --ec2-arg max_workers=1`; `--job-log auto` runs one
such job with Inspect as a worker does), every JSON entry rewritten per copy
(bench/_job_clone.py): fresh eval, run and task ids, sample id, uuid, times and scores;
`--epochs 1` makes every sample id distinct. Each merge runs in its own process
(bench/_merge_child.py); peak RSS is that child's when the merge returns (before the bench
counts the output's samples), wall time is around the merge call.

Three merges, all in the same run:
- streaming: ct_fleet.merge.merge_eval_logs of this tree, at 2,000, 10,000, 20,000 and
  100,000 files;
- baseline: the same function from another revision (--baseline REV, its lib/ extracted
  with git archive), at the same sizes: the speed reference;
- read-all: inspect_ai read_eval_log of every file, recompute_metrics, write_eval_log, at
  10,000 files.

Targets: peak RSS growth <= 0.5 KB per sample and <= 64 MB between 2,000 and 100,000
files; streaming wall <= 1.2 x baseline wall at 10,000 files; read-all / streaming >= 20x
at 10,000 files. `--one-epoch N` adds N files of distinct ids (1 epoch each), where what
Inspect's metrics need in memory (one reduced score per sample) shows.

    .venv/bin/python bench/merge.py --baseline cb3e613        # the sizes above
    .venv/bin/python bench/merge.py --baseline cb3e613 --quick    # 500 / 2,000 / 5,000 files
    .venv/bin/python bench/merge.py --baseline cb3e613 --job-log runs/FLEET/jobs/JOB.evaljob --epochs 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import _common as c
from _job_clone import JobLog, worker_job_log

EPOCHS = 100  # epochs per sample id of the generated inputs (--epochs)
GROWTH_KB_TARGET = 0.5
GROWTH_MB_TARGET = 64.0
SPEED_TARGET = 1.2
READ_ALL_TARGET = 20.0
CHILD = str(Path(__file__).with_name("_merge_child.py"))


# --------------------------------------------------------------------------- inputs


def _gen(args: tuple[Path, list[tuple[int, int]], str, Path | None]) -> int:
    src_dir, pairs, prefix, job_log = args
    if job_log is not None:
        job = JobLog.read(job_log)
        for k, epoch in pairs:
            job.clone(src_dir / f"{prefix}{k:06d}_{epoch:03d}.eval", f"{job.sample_id}-{prefix}{k:06d}", epoch)
        return len(pairs)
    tpl = c.templates()
    keys = sorted(tpl)
    for k, epoch in pairs:
        base = keys[k % len(keys)]
        c.clone(tpl[base], src_dir / f"{prefix}{k:06d}_{epoch:03d}.eval", f"{base}-{prefix}{k:06d}", epoch)
    return len(pairs)


def make_inputs(src_dir: Path, ids: int, epochs: int, prefix: str = "", job_log: Path | None = None) -> None:
    src_dir.mkdir(parents=True, exist_ok=True)
    if job_log is None:
        c.templates()  # run the real eval once, before forking
    pairs = [(k, e) for k in range(ids) for e in range(1, epochs + 1)]
    chunks = [(src_dir, pairs[i : i + 2000], prefix, job_log) for i in range(0, len(pairs), 2000)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        sum(pool.map(_gen, chunks))


def input_list(src_dir: Path, n: int, tmp: Path, epochs: int = EPOCHS, prefix: str = "") -> Path:
    ids = n // epochs
    path = tmp / f"inputs-{prefix}{n}.txt"
    with open(path, "w") as fh:
        for k in range(ids):
            for e in range(1, epochs + 1):
                fh.write(f"{src_dir / f'{prefix}{k:06d}_{e:03d}.eval'}\n")
    return path


def baseline_lib(rev: str, tmp: Path) -> Path:
    """REV's lib/ (git archive), for the baseline merge."""
    dest = tmp / f"baseline-{rev}"
    archive = tmp / "baseline.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), rev, "lib"], cwd=c.REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return dest / "lib"


# --------------------------------------------------------------------------- runs


def run(mode: str, lib: Path, inputs: Path, n: int, tmp: Path) -> dict[str, float]:
    out = tmp / f"out-{mode}-{n}"
    shutil.rmtree(out, ignore_errors=True)
    mode_arg = "naive" if mode == "read-all" else "streaming"
    res = c.measure_child([c.PYTHON, CHILD, mode_arg, str(lib), str(inputs), str(out)])
    shutil.rmtree(out, ignore_errors=True)
    r = res.report
    assert r["samples"] == n, f"{mode} merge of {n} wrote {r['samples']} samples"
    return {"n": n, "wall": r["wall"], "peak_mb": r["peak_mb"], "base_mb": r["base_mb"], "out_mb": r["out_mb"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="git revision whose merge is the speed (and memory) reference")
    ap.add_argument("--quick", action="store_true", help="500, 2,000 and 5,000 files (read-all at 2,000)")
    ap.add_argument("--sizes", help="comma-separated file counts (multiples of --epochs); the first is the reference")
    ap.add_argument("--read-all-at", type=int, help="files for the read-all merge (default 10,000)")
    ap.add_argument("--one-epoch", type=int, default=0, metavar="N", help="also merge N files of distinct ids")
    ap.add_argument(
        "--job-log",
        metavar="PATH|auto",
        help="clone this real fleet job log (runs/<fleet>/jobs/*.evaljob; 'auto': one toyarena job run by "
        "Inspect as a worker runs it) instead of splitting the bench's own eval",
    )
    ap.add_argument(
        "--epochs", type=int, default=EPOCHS, help=f"epochs per sample id (default {EPOCHS}; 1: all distinct)"
    )
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    sizes = [500, 2000, 5000] if args.quick else [2000, 10000, 20000, 100000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    read_all_at = args.read_all_at or (2000 if args.quick else 10000)
    speed_at = read_all_at if read_all_at in sizes else sizes[min(1, len(sizes) - 1)]
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("merge")
    src = tmp / "inputs"
    t0 = time.monotonic()
    job_log = None
    if args.job_log:
        job_log = worker_job_log() if args.job_log == "auto" else Path(args.job_log).resolve()
        console.print(f"[dim]inputs: copies of {job_log} under {args.epochs} epoch(s) per sample id[/]")
    epochs = args.epochs
    make_inputs(src, max(sizes + [read_all_at]) // epochs, epochs, job_log=job_log)
    if args.one_epoch:
        make_inputs(src, args.one_epoch, 1, prefix="u", job_log=job_log)
    console.print(f"[dim]inputs generated in {time.monotonic() - t0:.0f}s under {src}[/]")
    here = c.REPO / "lib"
    base_lib = baseline_lib(args.baseline, tmp) if args.baseline else None

    rows: list[tuple[str, dict[str, float]]] = []
    by: dict[tuple[str, int], dict[str, float]] = {}
    for n in sizes:
        inputs = input_list(src, n, tmp, epochs)
        plan = [("streaming", here)] + ([("baseline", base_lib)] if base_lib else [])
        for mode, lib in plan:
            r = run(mode, lib, inputs, n, tmp)
            rows.append((mode, r))
            by[(mode, n)] = r
            console.print(f"[dim]{n:,} {mode}: {r['wall']:.1f}s, peak {r['peak_mb']:.0f} MB[/]")
    if ("streaming", read_all_at) not in by:
        listed = input_list(src, read_all_at, tmp, epochs)
        by[("streaming", read_all_at)] = r = run("streaming", here, listed, read_all_at, tmp)
        rows.append(("streaming", r))
    r = run("read-all", here, input_list(src, read_all_at, tmp, epochs), read_all_at, tmp)
    rows.append(("read-all", r))
    by[("read-all", read_all_at)] = r
    if args.one_epoch:
        inputs = input_list(src, args.one_epoch, tmp, epochs=1, prefix="u")
        for mode, lib in [("streaming", here)] + ([("baseline", base_lib)] if base_lib else []):
            r = run(mode, lib, inputs, args.one_epoch, tmp)
            rows.append((f"{mode}, 1 epoch per id", r))

    what = f"copies of {job_log.name}" if job_log else "one-sample .eval files"
    table = Table(title=f"merging {what} (ids x {epochs} epochs; each merge in its own process)")
    for col in ("files", "merge", "wall s", "files/s", "peak RSS MB", "after imports MB", "output MB"):
        table.add_column(col, justify="right")
    for mode, r in rows:
        n = int(r["n"])
        table.add_row(
            f"{n:,}",
            mode,
            f"{r['wall']:.1f}",
            f"{n / r['wall']:.0f}",
            f"{r['peak_mb']:.0f}",
            f"{r['base_mb']:.0f}",
            f"{r['out_mb']:.0f}",
        )
    console.print(table)

    lo, hi = sizes[0], sizes[-1]
    growth_mb = by[("streaming", hi)]["peak_mb"] - by[("streaming", lo)]["peak_mb"]
    growth_kb = 1024 * growth_mb / (hi - lo)
    speedup = by[("read-all", read_all_at)]["wall"] / by[("streaming", read_all_at)]["wall"]
    mark = {True: "MET", False: "MISSED"}
    verdict = {
        "growth_kb": growth_kb <= GROWTH_KB_TARGET,
        "growth_mb": growth_mb <= GROWTH_MB_TARGET,
        "read_all": speedup >= READ_ALL_TARGET,
    }
    peaks = ", ".join(f"{by[('streaming', n)]['peak_mb']:.0f}" for n in sizes)
    counts = ", ".join(f"{n:,}" for n in sizes)
    parts = [
        f"peak RSS {peaks} MB at {counts} files",
        f"growth {growth_kb:.2f} KB/sample (target <= {GROWTH_KB_TARGET}: {mark[verdict['growth_kb']]}), "
        f"{growth_mb:.0f} MB from {lo:,} to {hi:,} (target <= {GROWTH_MB_TARGET:.0f}: {mark[verdict['growth_mb']]})",
        f"read-all / streaming at {read_all_at:,} = {speedup:.1f}x (target >= {READ_ALL_TARGET:.0f}x: "
        f"{mark[verdict['read_all']]})",
    ]
    if base_lib:
        ratio = by[("streaming", speed_at)]["wall"] / by[("baseline", speed_at)]["wall"]
        verdict["speed"] = ratio <= SPEED_TARGET
        base_growth = by[("baseline", hi)]["peak_mb"] - by[("baseline", lo)]["peak_mb"]
        parts.append(
            f"streaming / baseline {args.baseline} wall at {speed_at:,} = {ratio:.2f} (target <= {SPEED_TARGET}: "
            f"{mark[verdict['speed']]}); baseline growth {1024 * base_growth / (hi - lo):.2f} KB/sample"
        )
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    print("merge: " + "; ".join(parts))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(verdict.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
