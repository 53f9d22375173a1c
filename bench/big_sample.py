"""A result whose sample entry is large (written in several zstd frames, as Inspect writes an
entry over 200 MiB): the time and peak memory of the controller's check of it
(evallog.verify.problem, in a fresh process without Inspect loaded), against the time to
read the same bytes off disk. Usage: bench/big_sample.py [MiB] (default 1024)."""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ct_fleet.evallog import zipio

CHECK = (
    "import resource, sys, time; from pathlib import Path; from ct_fleet.evallog import problem; "
    "t = time.perf_counter(); said = problem(Path(sys.argv[1])); "
    "print(said, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
)


def write(path: Path, mib: int) -> None:
    rng = random.Random(0)
    words = [w.encode() for w in "the agent read file wrote line tool call output error retry model token".split()]
    head = json.dumps({"id": "s0", "epoch": 1, "messages": []})[:-2].encode()

    def chunks():
        yield head
        left = mib << 20
        first = True
        while left > 0:  # a transcript: messages of words in no repeating order (inflates ~4x, as logs do)
            text = b" ".join(rng.choices(words, k=800)).decode()
            message = (b"" if first else b",") + json.dumps({"role": "assistant", "content": text}).encode()
            first = False
            yield message
            left -= len(message)
        yield b"]}"

    with open(path, "wb") as fh, zipio.open_writer(fh) as zf:
        zipio.write_member(zf, "header.json", json.dumps({"status": "success", "eval": {"task": "t"}}).encode())
        zipio.write_member_chunks(zf, "samples/s0_epoch_1.json", chunks())
        zipio.write_member(zf, "summaries.json", b'[{"id":"s0","epoch":1}]')


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    with tempfile.TemporaryDirectory(prefix="ct-bench-big-") as tmp:
        path = Path(tmp) / "big.eval"
        write(path, mib)
        t = time.perf_counter()
        with open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
        disk = time.perf_counter() - t
        out = subprocess.run([sys.executable, "-c", CHECK, str(path)], capture_output=True, text=True, check=True)
        *words, seconds, peak = out.stdout.split()
        said = " ".join(words)
        print(
            f"sample {mib} MiB, log {path.stat().st_size >> 20} MiB: check says {said}; "
            f"{float(seconds):.1f} s ({mib / float(seconds):.0f} MiB/s), peak RSS {peak} MiB; "
            f"read off disk {disk:.2f} s; writer peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB"
        )


if __name__ == "__main__":
    main()
