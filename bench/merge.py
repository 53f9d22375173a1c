#!/usr/bin/env python
"""merge: streaming merge (ct_fleet.merge.merge_eval_logs) vs the naive merge, time and memory.

Inputs are one-sample .eval files cloned from one real toyarena eval, each a distinct
(sample id, epoch): ids x 100 epochs (1,000 = 10 ids, 10,000 = 100 ids, 100,000 = 1,000 ids).
Each merge runs in its own subprocess; wall time is measured around the merge call and
peak RSS comes from os.wait4 (that child's rusage). "Extra" memory = peak RSS minus the
child's RSS after imports (same imports for both).

naive = inspect_ai read_eval_log of every file, one EvalLog holding all samples
(recompute_metrics), write_eval_log.

Targets: at 10,000 files streaming is at least 15x faster than naive; streaming extra
memory at most 100 MB at 10,000 and growing at most 2 KB per sample (100,000 streaming only).

    .venv/bin/python bench/merge.py            # 1,000 and 10,000 both ways, 100,000 streaming
    .venv/bin/python bench/merge.py --quick    # 200 and 1,000 both ways, 5,000 streaming
    .venv/bin/python bench/merge.py --trace 20000   # where the streaming merge's memory goes
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import _common as c

SPEEDUP_TARGET = 15.0
EXTRA_MB_TARGET = 100.0
PER_SAMPLE_KB_TARGET = 2.0
EPOCHS = 100


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- child side


def child(mode: str, list_file: Path, out_dir: Path) -> None:
    import inspect_ai._eval.score  # noqa: F401
    import inspect_ai._eval.task.results  # noqa: F401
    from inspect_ai.log import read_eval_log, recompute_metrics, write_eval_log

    from ct_fleet.merge import merge_eval_logs

    paths = [Path(p) for p in list_file.read_text().split("\n") if p]
    base = _rss_mb()
    t0 = time.monotonic()
    if mode == "streaming":
        merged = merge_eval_logs(paths, out_dir)
        out = merged[0].path
    else:
        samples = []
        first = None
        for p in paths:
            log = read_eval_log(str(p))
            if first is None:
                first = log
            samples.extend(log.samples or [])
        assert first is not None
        ids = list(dict.fromkeys(s.id for s in samples))
        merged_log = first.model_copy()
        merged_log.samples = sorted(samples, key=lambda s: (s.epoch, ids.index(s.id) if len(ids) < 2000 else str(s.id)))
        merged_log.eval.dataset.sample_ids = ids
        merged_log.eval.config.epochs = max(s.epoch for s in samples)
        merged_log.eval.config.sample_id = None
        recompute_metrics(merged_log)
        out = out_dir / "naive.eval"
        out_dir.mkdir(parents=True, exist_ok=True)
        write_eval_log(merged_log, str(out))
    wall = time.monotonic() - t0
    with zipfile.ZipFile(out) as zf:
        count = sum(1 for n in zf.namelist() if n.startswith("samples/"))
    print(json.dumps({"wall": wall, "base_mb": base, "samples": count, "out_mb": out.stat().st_size / 2**20}))


def trace(src_dir: Path, n: int) -> None:
    """Where the streaming merge's memory goes, phase by phase (tracemalloc; a diagnostic).

    Calls ct_fleet.merge's private steps in the order _merge_group does: keep in step with it.
    """
    import tracemalloc

    import inspect_ai._eval.score  # noqa: F401
    import inspect_ai._eval.task.results  # noqa: F401

    from ct_fleet import merge as m

    paths = sorted(src_dir.glob("*.eval"))[:n]
    tracemalloc.start(2)
    groups = m._group_inputs(paths)
    kept_bytes, _ = tracemalloc.get_traced_memory()
    top = tracemalloc.take_snapshot().statistics("lineno")[:6]
    tracemalloc.reset_peak()
    g = groups[0]
    ids, epochs = m._selection(g, None, None)
    kept = [g.records[(str(i), e)] for e in range(1, epochs + 1) for i in ids if (str(i), e) in g.records]
    header = m._header(g, src_dir / "trace.eval", "trace", ids, epochs, kept)
    results, reductions = m._compute_results(header, kept, len(kept), len(kept))
    after_results, peak_results = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    header.results = results
    out = src_dir.parent / "trace-out.eval"
    m._write(out, header, reductions, g, kept)
    _, peak_write = tracemalloc.get_traced_memory()
    out.unlink()
    kb = 1024 * len(paths)
    print(f"{len(paths):,} files (tracemalloc, KB per sample):")
    print(f"  pass 1 (_group_inputs) keeps        {kept_bytes / kb:6.2f}")
    print(f"  _compute_results adds at its peak    {(peak_results - kept_bytes) / kb:6.2f}")
    print(f"  _write adds at its peak              {(peak_write - after_results) / kb:6.2f}")
    print("  largest allocation sites kept by pass 1:")
    for stat in top:
        print(f"    {stat}")


# --------------------------------------------------------------------------- inputs


def _gen(args: tuple[Path, list[tuple[int, int]]]) -> int:
    src_dir, pairs = args
    tpl = c.templates()
    keys = sorted(tpl)
    for k, epoch in pairs:
        base = keys[k % len(keys)]
        c.clone(tpl[base], src_dir / f"{k:05d}_{epoch:03d}.eval", f"{base}-{k:05d}", epoch)
    return len(pairs)


def make_inputs(src_dir: Path, ids: int) -> None:
    src_dir.mkdir(parents=True, exist_ok=True)
    c.templates()  # run the real eval once, before forking
    pairs = [(k, e) for k in range(ids) for e in range(1, EPOCHS + 1)]
    chunks = [(src_dir, pairs[i : i + 2000]) for i in range(0, len(pairs), 2000)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        sum(pool.map(_gen, chunks))


def input_list(src_dir: Path, n: int, tmp: Path) -> Path:
    ids = n // EPOCHS
    files = [str(src_dir / f"{k:05d}_{e:03d}.eval") for k in range(ids) for e in range(1, EPOCHS + 1)]
    path = tmp / f"inputs-{n}.txt"
    path.write_text("\n".join(files) + "\n")
    return path


# --------------------------------------------------------------------------- parent


def run(mode: str, n: int, src_dir: Path, tmp: Path) -> dict[str, float]:
    out = tmp / f"out-{mode}-{n}"
    shutil.rmtree(out, ignore_errors=True)
    res = c.measure_child([c.PYTHON, __file__, "--child", mode, str(input_list(src_dir, n, tmp)), str(out)])
    shutil.rmtree(out, ignore_errors=True)
    r = res.report
    assert r["samples"] == n, f"{mode} merge of {n} wrote {r['samples']} samples"
    return {
        "n": n,
        "wall": r["wall"],
        "peak_mb": res.maxrss_mb,
        "extra_mb": res.maxrss_mb - r["base_mb"],
        "out_mb": r["out_mb"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=3, metavar=("MODE", "LIST", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="200 and 1,000 both ways, 5,000 streaming only")
    ap.add_argument("--naive-limit", type=float, default=600, help="seconds: extrapolate naive runs predicted longer")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--trace", type=int, metavar="N", help="only trace the streaming merge's memory on N files")
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0
    if args.trace:
        tmp = c.bench_tmp("merge-trace")
        make_inputs(tmp / "inputs", max(1, args.trace // EPOCHS))
        trace(tmp / "inputs", args.trace)
        shutil.rmtree(tmp, ignore_errors=True)
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 130))
    both = [200, 1000] if args.quick else [1000, 10000]
    alone = 5000 if args.quick else 100000
    tmp = c.bench_tmp("merge")
    src = tmp / "inputs"
    t0 = time.monotonic()
    make_inputs(src, alone // EPOCHS)
    console.print(f"[dim]{alone:,} one-sample inputs generated in {time.monotonic() - t0:.0f}s under {src}[/]")

    rows: dict[tuple[str, int], dict[str, float]] = {}
    extrapolated: set[int] = set()
    for n in both:
        rows[("streaming", n)] = run("streaming", n, src, tmp)
        prev = [k for k in rows if k[0] == "naive"]
        predicted = rows[prev[-1]]["wall"] * n / prev[-1][1] if prev else 0
        if predicted > args.naive_limit:
            # Too slow to run: fit naive wall and memory linearly on smaller sizes.
            for m in (n // 5, n // 2):
                rows[("naive", m)] = run("naive", m, src, tmp)
            (a, ra), (b, rb) = sorted((m, rows[("naive", m)]) for m in (n // 5, n // 2))
            fit = {
                key: ra[key] + (rb[key] - ra[key]) * (n - a) / (b - a)
                for key in ("wall", "peak_mb", "extra_mb", "out_mb")
            }
            rows[("naive", n)] = {"n": n, **fit}
            extrapolated.add(n)
        else:
            rows[("naive", n)] = run("naive", n, src, tmp)
        console.print(
            f"[dim]{n:,}: streaming {rows[('streaming', n)]['wall']:.1f}s, naive {rows[('naive', n)]['wall']:.1f}s[/]"
        )
    rows[("streaming", alone)] = run("streaming", alone, src, tmp)

    table = Table(title="merging one-sample .eval files (each merge in its own process)")
    for col in (
        "files",
        "method",
        "wall s",
        "files/s",
        "peak RSS MB",
        "extra MB",
        "extra KB/sample",
        "output MB",
        "speedup",
    ):
        table.add_column(col, justify="right")
    for (mode, n), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "streaming")):
        speed = ""
        if mode == "naive" and ("streaming", n) in rows:
            speed = f"{r['wall'] / rows[('streaming', n)]['wall']:.1f}x"
        label = mode + (" (extrapolated)" if mode == "naive" and n in extrapolated else "")
        table.add_row(
            f"{n:,}",
            label,
            f"{r['wall']:.1f}",
            f"{n / r['wall']:.0f}",
            f"{r['peak_mb']:.0f}",
            f"{r['extra_mb']:.0f}",
            f"{1024 * r['extra_mb'] / n:.1f}",
            f"{r['out_mb']:.0f}",
            speed,
        )
    console.print(table)

    big = both[-1]
    s_big, n_big = rows[("streaming", big)], rows[("naive", big)]
    speedup = n_big["wall"] / s_big["wall"]
    growth_kb = 1024 * (rows[("streaming", alone)]["extra_mb"] - s_big["extra_mb"]) / (alone - big)
    verdict = {
        "speedup": speedup >= SPEEDUP_TARGET,
        "extra": s_big["extra_mb"] <= EXTRA_MB_TARGET,
        "growth": growth_kb <= PER_SAMPLE_KB_TARGET,
    }
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    mark = {True: "MET", False: "MISSED"}
    print(
        f"merge: at {big:,} files streaming {s_big['wall']:.1f}s vs naive {n_big['wall']:.1f}s"
        f"{' (extrapolated)' if big in extrapolated else ''} = {speedup:.1f}x (target >= {SPEEDUP_TARGET:.0f}x: {mark[verdict['speedup']]}); "
        f"streaming extra memory {s_big['extra_mb']:.0f} MB at {big:,} (target <= {EXTRA_MB_TARGET:.0f}: {mark[verdict['extra']]}), "
        f"{rows[('streaming', alone)]['extra_mb']:.0f} MB at {alone:,}, growth {growth_kb:.1f} KB/sample "
        f"(target <= {PER_SAMPLE_KB_TARGET:.0f}: {mark[verdict['growth']]})"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(verdict.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
