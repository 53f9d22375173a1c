"""What a module takes from Inspect's private API (tests/repo/test_layout.py allows it in one
module only; tests/dropin/test_inspect_private.py checks each name still resolves)."""

from __future__ import annotations

import ast


def _private_inspect(dotted: str) -> bool:
    head, *rest = dotted.split(".")
    return head == "inspect_ai" and any(part.startswith("_") and not part.startswith("__") for part in rest)


def private_inspect_imports(tree: ast.AST) -> list[str]:
    """What a module takes from Inspect's private API: `inspect_ai._eval...`, a private
    submodule (`inspect_ai.log._log`) or name (`from inspect_ai.scorer import _metric`),
    also under TYPE_CHECKING or through importlib (a type-only import breaks an upgrade too)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(node.args[0].value)
    return sorted({name for name in found if _private_inspect(name)})
