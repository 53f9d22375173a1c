"""Load a plain Inspect task once, as a worker would, and list its samples under a selection.

    python -m ct_fleet.controller.planning.probe < request.json > answer.json

Run by controller/tasks.py in a subprocess whose working directory is the shipped code
image and whose sys.path is a worker's (the code's lib, examples/settings, the unpacked
--extra-src trees), so a task that loads here loads on the workers; the user's code runs
in that throwaway process, not in the controller.

Request: {"spec": ..., "task_args": {...}, "limit": N | [start, stop] | null,
"sample_id": [patterns] | null}. Answer: {"tasks": [{"name", "sample_ids", "epochs",
"registry_name", "sandbox_types"}]} with each task's selected ids in dataset order, with their types; or
exit 1 with the error on one line, last on stderr.

Inspect's task loader and `slice_dataset` (private, through ct_fleet/inspect_private.py)
make the selection exactly the one `inspect eval` makes.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _sandbox_type(holder: Any) -> str | None:
    """The sandbox type a task or sample names: a spec, a bare type, or a (type, config) pair."""
    spec = getattr(holder, "sandbox", None)
    if spec is None or isinstance(spec, str):
        return spec
    kind = getattr(spec, "type", None)
    if kind is None and isinstance(spec, tuple | list) and spec:
        kind = spec[0]
    return str(kind) if kind else None


def probe(request: dict[str, Any]) -> dict[str, Any]:
    from ...inspect_private import load_tasks, slice_dataset

    limit = request.get("limit")
    tasks = load_tasks([request["spec"]], request.get("task_args") or {})
    answers = []
    for task in tasks:
        dataset = task.dataset
        # Inspect numbers samples without an id from 1 before it selects (eval's run setup).
        for index, sample in enumerate(dataset):
            if sample.id is None:
                sample.id = index + 1
        chosen = slice_dataset(dataset, tuple(limit) if isinstance(limit, list) else limit, request.get("sample_id"))
        answers.append(
            {
                "name": task.name,
                "sample_ids": [s.id for s in chosen],
                "epochs": task.epochs,
                "registry_name": task.registry_name,
                "sandbox_types": sorted({t for t in map(_sandbox_type, [task, *chosen]) if t}),
            }
        )
    return {"tasks": answers}


def main() -> int:
    request = json.load(sys.stdin)
    try:
        answer = probe(request)
    except BaseException as exc:  # the user's code: anything may come out of it
        text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"{type(exc).__name__}: {text[:400]}".rstrip(": "), file=sys.stderr)
        return 1
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
