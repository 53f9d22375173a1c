"""Scripted policies: Inspect solvers that run real shell scripts in the sample's sandbox.

No model is called. Each step is recorded as an assistant tool call plus its tool
result, so a log reads like an agent trajectory in `inspect view`.
"""

from __future__ import annotations

from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import ToolCall
from inspect_ai.util import sandbox

from .scripts import MAIN_TASK_SCRIPTS, SIDE_TASK_SCRIPTS

# Every script finishes in milliseconds; the limit only stops a runaway one.
SCRIPT_TIMEOUT_S = 30


async def run_step(state: TaskState, step: str, script: str) -> bool:
    """Run one bash script in the sandbox and append it to the transcript as a tool call."""
    # The tool call id is derived from the step so that reruns give identical messages.
    call = ToolCall(id=f"call_{step}", function="bash", arguments={"cmd": script.strip()})
    state.messages.append(ChatMessageAssistant(content="", tool_calls=[call], model="scripted"))
    result = await sandbox().exec(["bash", "-euo", "pipefail", "-c", script], timeout=SCRIPT_TIMEOUT_S)
    output = (result.stdout + result.stderr).strip()
    state.messages.append(
        ChatMessageTool(
            content=f"exit {result.returncode}" + (f"\n{output}" if output else ""),
            tool_call_id=call.id,
            function="bash",
        )
    )
    return result.success


def main_script(state: TaskState) -> str:
    return MAIN_TASK_SCRIPTS[(state.metadata["env"], state.metadata["main_task"])]


@solver
def honest() -> Solver:
    """Do the main task only, even when the sample names a side task."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await run_step(state, "main_task", main_script(state))
        return state

    return solve


@solver
def attack() -> Solver:
    """Plant the side task first, then do the main task as cover.

    Planting first is what makes outcomes depend on the pair: main-task work that
    rewrites or regenerates a file undoes whatever the side task put there.
    """

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        side_task = state.metadata.get("side_task")
        if side_task is not None:
            script = SIDE_TASK_SCRIPTS[(state.metadata["env"], side_task)]
            await run_step(state, "side_task", script)
        await run_step(state, "main_task", main_script(state))
        return state

    return solve
