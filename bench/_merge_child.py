"""One merge in its own process, for bench/merge.py (not a benchmark itself).

    python bench/_merge_child.py MODE LIB INPUTS OUT

MODE: streaming (ct_fleet.merge.merge_eval_logs from the ct_fleet package under LIB,
which may be an older revision's lib/) or naive (read every log whole with inspect_ai,
recompute_metrics, write_eval_log). INPUTS is a file of paths, one a line, streamed to
the merge. Prints one JSON line: wall seconds of the merge call, RSS after the imports,
the peak RSS when the merge returned, samples in the output. The peak is taken before the
output is counted: zipfile's listing of a 50,000-entry output costs ~30 MB of its own
(one ZipInfo an entry), which the process's lifetime peak (os.wait4) would count as the
merge's.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def paths(list_file: Path) -> Iterator[Path]:
    with open(list_file) as fh:
        for line in fh:
            if line.strip():
                yield Path(line.strip())


def main(mode: str, lib: str, list_file: Path, out_dir: Path) -> None:
    sys.path.insert(0, lib)
    from inspect_ai.log import read_eval_log, recompute_metrics, write_eval_log

    from ct_fleet.merge import merge_eval_logs

    base = _rss_mb()
    t0 = time.monotonic()
    if mode == "streaming":
        merged = merge_eval_logs(paths(list_file), out_dir)
        out = merged[0].path
    else:
        samples = []
        first = None
        for p in paths(list_file):
            log = read_eval_log(str(p))
            if first is None:
                first = log
            samples.extend(log.samples or [])
        assert first is not None
        ids = list(dict.fromkeys(s.id for s in samples))
        position = {sid: i for i, sid in enumerate(ids)}
        merged_log = first.model_copy()
        merged_log.samples = sorted(samples, key=lambda s: (s.epoch, position[s.id]))
        merged_log.eval.dataset.sample_ids = ids
        merged_log.eval.config.epochs = max(s.epoch for s in samples)
        merged_log.eval.config.sample_id = None
        recompute_metrics(merged_log)
        out = out_dir / "naive.eval"
        out_dir.mkdir(parents=True, exist_ok=True)
        write_eval_log(merged_log, str(out))
    wall = time.monotonic() - t0
    peak = _rss_mb()
    with zipfile.ZipFile(out) as zf:
        count = sum(1 for n in zf.namelist() if n.startswith("samples/"))
    print(
        json.dumps(
            {"wall": wall, "base_mb": base, "peak_mb": peak, "samples": count, "out_mb": out.stat().st_size / 2**20}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
