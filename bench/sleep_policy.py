"""A bench policy: sleep in the sample's sandbox (CT_BENCH_SLEEP seconds, default 2), then
do the honest policy's work. Stands in for QA-style samples whose time goes into the
sandbox; used by bench/fleet_vs_inspect.py on the fleet and in the direct Inspect run.

    --policy bench.sleep_policy:sleep_then_honest
"""

from __future__ import annotations

import os

from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import sandbox
from toyarena.policies import honest


@solver
def sleep_then_honest() -> Solver:
    inner = honest()

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await sandbox().exec(["sleep", os.environ.get("CT_BENCH_SLEEP", "2")])
        return await inner(state, generate)

    return solve
