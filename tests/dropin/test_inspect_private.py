"""Every private inspect_ai name ct-fleet uses still resolves; if one moved, the failure says which.

The names are read from the imports of ct_fleet/inspect_private.py (the only module allowed
them: tests/repo/test_layout.py), so a name added there is covered without listing it here.
Call signatures are mypy's to check (inspect_ai ships types).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
from pathlib import Path

import pytest

from testkit.inspect_imports import private_inspect_imports

ADAPTER = Path(__file__).resolve().parents[2] / "lib" / "ct_fleet" / "inspect_private.py"
TREE = ast.parse(ADAPTER.read_text())
VERSION = importlib.metadata.version("inspect_ai")


def imported_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    """(module, name) for each `from inspect_ai... import name`, (module, None) for `import inspect_ai...`."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "inspect_ai":
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] == "inspect_ai"]
    return out


NAMES = imported_names(TREE)


def resolve(module: str, name: str | None) -> object:
    """The imported object, or an AssertionError naming what moved and where to fix it."""
    where = f"{module}.{name}" if name else module
    fix = f"{where} is gone in inspect_ai {VERSION}: update ct_fleet/inspect_private.py"
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise AssertionError(f"{fix} ({exc})") from None
    if name is None:
        return found
    if not hasattr(found, name):
        raise AssertionError(fix)
    return getattr(found, name)


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[f"{m}.{n}" if n else m for m, n in NAMES])
def test_each_private_name_resolves(module: str, name: str | None) -> None:
    resolve(module, name)


def test_the_adapter_holds_only_private_names() -> None:
    """A public name belongs in its caller; a private one anywhere else fails test_layout."""
    assert NAMES, "no inspect_ai import found in ct_fleet/inspect_private.py"
    public = [f"{m}.{n}" for m, n in NAMES if f"{m}.{n}" not in private_inspect_imports(TREE)]
    assert not public, f"public inspect_ai names in ct_fleet/inspect_private.py, import them where used: {public}"


def test_the_adapter_exports_what_it_says() -> None:
    import ct_fleet.inspect_private as adapter

    assert adapter.__all__
    assert [n for n in adapter.__all__ if not hasattr(adapter, n)] == []


def test_a_moved_name_is_named() -> None:
    with pytest.raises(AssertionError) as gone:
        resolve("inspect_ai._eval.loader", "load_tasks_renamed")
    assert str(gone.value) == (
        f"inspect_ai._eval.loader.load_tasks_renamed is gone in inspect_ai {VERSION}: update ct_fleet/inspect_private.py"
    )
    with pytest.raises(AssertionError, match=r"^inspect_ai\._eval\.moved\.load_tasks is gone in inspect_ai "):
        resolve("inspect_ai._eval.moved", "load_tasks")
