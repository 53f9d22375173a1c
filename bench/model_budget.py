#!/usr/bin/env python
"""model_budget: throughput at a provider's concurrency limit, with and without the budget.

A loopback OpenAI-compatible server (tests/testkit/openai_stub.py --max-concurrent L --latency S)
answers at most L requests at once, each after S seconds, and refuses any beyond with HTTP
429. The same Inspect task (each sample K turns of generate) runs on the local fleet twice,
in one run of this bench: without a model budget (main's behaviour: every job's Inspect
makes its own requests, and backs off on 429s alone) and with `--max-connections L` (the
fleet-wide budget, docs/model-budget.md). For each, from the server's log:

    throughput = requests answered per second in the steady state (between the 10th and
                 the 90th percentile of the answers), over the provider's limit L / S
    429 share  = refused requests over all requests
    target     : throughput >= 0.9 of L / S with the budget, 429 share <= 1%

    .venv/bin/python bench/model_budget.py           # L=8, S=2.0 s, 48 samples x 8 turns, 2 workers x 8 slots
    .venv/bin/python bench/model_budget.py --latency 1.0 --turns 10   # the shorter answers of RESULTS 15
    .venv/bin/python bench/model_budget.py --quick   # 24 samples x 6 turns

Each request's token is taken and given back in the job's process, around its HTTP call
(worker/job_hook.py): what the job does between the two besides waiting for the answer is
lost from every S. Measured (RESULTS 18): a job's first request spent ~1 s there reading
Inspect's model database, now read once by the warm runner's server; what remains is
~0.1 s a request on a loaded 2-core machine, so the fraction still rises with S.

    .venv/bin/python bench/model_budget.py --adaptive 4-8-16 --only with --keep   # one side, budget.jsonl kept
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import _common as c
from rich.console import Console
from rich.table import Table

TARGET_THROUGHPUT = 0.9
TARGET_429 = 0.01
MODEL = "openai-api/stubai/scripted"

TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, solver
from inspect_ai.model import ChatMessageUser


@solver
def turns(k: int):
    async def solve(state, generate_):
        for i in range(k):
            if i:
                state.messages.append(ChatMessageUser(content=f"What is {i} times 3?"))
            state = await generate_(state)
        return state

    return solve


@task
def chat(n: int = 8, k: int = 4):
    samples = [Sample(id=i, input=f"What is {i} times 7?", target=str(i * 7)) for i in range(1, n + 1)]
    return Task(dataset=MemoryDataset(samples), solver=turns(k), scorer=includes())
"""


def start_stub(where: Path, key: str, limit: int, latency: float) -> tuple[subprocess.Popen[bytes], str, Path]:
    log = where / "stub.log"
    proc = subprocess.Popen(
        [
            c.PYTHON,
            str(c.REPO / "tests" / "testkit" / "openai_stub.py"),
            "--port-file",
            str(where / "port"),
            "--log",
            str(log),
            "--rate-limit-every",
            "0",
            "--max-concurrent",
            str(limit),
            "--latency",
            str(latency),
        ],
        env={**os.environ, "STUB_API_KEY": key},
    )
    for _ in range(300):
        if (where / "port").exists() and (where / "port").read_text():
            return proc, f"http://127.0.0.1:{(where / 'port').read_text()}/v1", log
        time.sleep(0.1)
    raise SystemExit("the model stub did not start")


def steady_rate(times: list[float]) -> tuple[float, float]:
    """(answers per second between the 10th and 90th percentile answer, that window's seconds)."""
    times = sorted(times)
    lo, hi = times[len(times) // 10], times[(len(times) * 9) // 10]
    inside = sum(1 for t in times if lo <= t <= hi)
    return (inside - 1) / (hi - lo), hi - lo


def run(tag: str, tmp: Path, args: argparse.Namespace, samples: int, turns: int, budget: bool) -> dict[str, float]:
    where = tmp / tag
    where.mkdir()
    key = "sk-bench-" + uuid.uuid4().hex
    stub, base_url, log = start_stub(where, key, args.limit, args.latency)
    try:
        (where / "chat.py").write_text(TASK)
        runs = where / "runs"
        runs.mkdir()
        (runs / ".env").write_text(f"STUBAI_API_KEY={key}\nSTUBAI_BASE_URL={base_url}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "INSPECT_", "STUBAI_"))}
        env.update(CT_FLEET_RUNS=str(runs), CT_FLEET_DOTENV=str(runs / ".env"))
        argv = [
            str(c.REPO / "bin" / "ct-fleet"),
            "eval",
            "chat.py@chat",
            "-T",
            f"n={samples}",
            "-T",
            f"k={turns}",
            "--model",
            MODEL,
            "--json",
            *("--ec2-arg", f"max_workers={args.workers}", "--ec2-arg", f"concurrency_per_worker={args.slots}"),
            *(_budget_args(args) if budget else ()),
        ]
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=3600)
        wall = time.monotonic() - t0
        (where / "cli.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"{tag}: ct-fleet exited {done.returncode}: see {where / 'cli.log'}")
        summary = json.loads(done.stdout)
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    answered = [e["t1"] for e in entries if e["status"] == 200]
    refused = sum(1 for e in entries if e["status"] == 429)
    rate, window = steady_rate(answered)
    return {
        "requests": len(entries),
        "answered": len(answered),
        "refused": refused,
        "share_429": refused / len(entries),
        "rate": rate,
        "window": window,
        "fraction": rate / (args.limit / args.latency),
        "workers": summary["workers_launched"],
        "wall": wall,
        "span": max(answered) - min(answered),
    }


def _budget_args(args: argparse.Namespace) -> tuple[str, ...]:
    """--max-connections L, or --adaptive-connections SPEC (a total that finds L itself)."""
    return ("--adaptive-connections", args.adaptive) if args.adaptive else ("--max-connections", str(args.limit))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=8, help="L: the provider's requests at once")
    ap.add_argument("--latency", type=float, default=2.0, help="S: seconds per answer")
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="24 samples x 6 turns")
    ap.add_argument("--adaptive", default="", help="with --adaptive-connections SPEC (e.g. 4-8-16) instead of L")
    ap.add_argument("--only", choices=("with", "without"), help="one of the two runs (to study it)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    samples, turns = (24, 6) if args.quick else (args.samples, args.turns)
    console = Console(width=max(Console().width, 130))
    tmp = c.bench_tmp("model-budget")
    results = {}
    for tag, budget in (("without", False), ("with", True)):
        if args.only and tag != args.only:
            continue
        console.print(f"[dim]{tag} the budget: {samples} samples x {turns} turns ...[/]")
        results[tag] = run(tag, tmp, args, samples, turns, budget)
    table = Table(
        title=f"model budget: L={args.limit} at once, {args.latency} s each (limit {args.limit / args.latency:.1f}/s), "
        f"{samples} samples x {turns} turns, max {args.workers} workers x {args.slots} slots"
    )
    for col in ("run", "workers", "requests", "429s", "429 share", "steady req/s", "of L/S", "answers span s", "CLI s"):
        table.add_column(col, justify="right")
    for tag, r in results.items():
        table.add_row(
            f"{tag} the budget",
            str(r["workers"]),
            str(r["requests"]),
            str(r["refused"]),
            f"{100 * r['share_429']:.1f}%",
            f"{r['rate']:.2f}",
            f"{r['fraction']:.3f}",
            f"{r['span']:.1f}",
            f"{r['wall']:.0f}",
        )
    console.print(table)
    console.print(f"[dim]{c.machine()}; temp dir {tmp}{' (kept)' if args.keep else ' (removed)'}[/]")
    if args.only:
        return 0
    w, wo = results["with"], results["without"]
    met = w["fraction"] >= TARGET_THROUGHPUT and w["share_429"] <= TARGET_429
    print(
        f"model_budget: L={args.limit}, S={args.latency}s; without the budget {wo['fraction']:.3f} of L/S with "
        f"{100 * wo['share_429']:.1f}% 429s; with it {w['fraction']:.3f} with {100 * w['share_429']:.1f}% 429s "
        f"(target >= {TARGET_THROUGHPUT}, <= {100 * TARGET_429:.0f}%: {'MET' if met else 'MISSED'})"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main())
