"""Task files the tests write beside them, as source text."""

# One sample, a solver that calls no model: Inspect runs it offline (mockllm's generate
# would download a tokenizer file).
NO_MODEL_CALL = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.solver import solver


@solver
def nothing():
    async def solve(state, generate):
        return state

    return solve


@task
def t():
    return Task(dataset=[Sample(id=1, input="x")], solver=nothing())
"""
