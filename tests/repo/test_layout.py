"""The import rule: which side may import what (lib/ct_fleet's sub-packages).

- the worker side (ct_fleet.worker and everything it imports) never reaches the
  controller, the CLI, the merge, the AMI tooling or the cloud seam;
- the protocol imports no AWS SDK, directly or through another module;
- cloud/ and services/ never reach the controller (they are below it);
- only ct_fleet.cloud knows which cloud it is: no other module names a cloud class or
  branches on `embedded`;
- the controller is three parts (planning, fleet, reporting): cli/ imports only their
  faces, planning knows neither of the others, reporting does not know the fleet;
- no module imports itself back through others (no import circle);
- no module over 400 lines, no class over 250.
- only ct_fleet.inspect_private imports Inspect's private modules and names;
- the environment is read where a process starts (the CLI, the worker's and its jobs'
  entries, the fork server's, `python -m ct_fleet.settings`), by the public API's request,
  and by ct_fleet.environment for a child to inherit; nothing reads it at import time.

Imports are read with ast (module level and inside functions), following each module's
imports transitively; imports under `if TYPE_CHECKING:` are types only and not followed.
A string naming a ct_fleet module (`python -m ct_fleet...`, `import_module("ct_fleet...")`)
counts as an import of it.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from testkit.inspect_imports import private_inspect_imports

LIB = Path(__file__).resolve().parents[2] / "lib"
PACKAGE = LIB / "ct_fleet"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    base = module.split(".") if is_package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                prefix = base[: len(base) - node.level + 1]
                target = ".".join([*prefix, node.module] if node.module else prefix)
            else:
                target = node.module or ""
            found.add(target)
            # `from . import x` may name a submodule
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
            found.add(node.value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


@cache
def direct_imports(module: str) -> frozenset[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    return frozenset(_imports_of(tree, module, path.name == "__init__.py"))


def _own(name: str) -> str | None:
    """The ct_fleet module an import names (a submodule, else its package), or None."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def closure(start: str) -> dict[str, str]:
    """Every import reachable from `start`: name -> the ct_fleet module that imports it."""
    seen: dict[str, str] = {}
    todo = [start]
    done: set[str] = set()
    while todo:
        module = todo.pop()
        if module in done:
            continue
        done.add(module)
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        parents = module.split(".")
        todo.extend(".".join(parents[:i]) for i in range(1, len(parents)) if ".".join(parents[:i]) in MODULES)
        for name in direct_imports(module):
            seen.setdefault(name, module)
            own = _own(name)
            if own and own not in done:
                todo.append(own)
    return seen


WORKER_SIDE = sorted(m for m in MODULES if m == "ct_fleet.worker" or m.startswith("ct_fleet.worker."))
CONTROLLER_ONLY = ("ct_fleet.controller", "ct_fleet.cli", "ct_fleet.merge", "ct_fleet.ami", "ct_fleet.cloud")


def _under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("module", WORKER_SIDE)
def test_the_worker_side_never_reaches_the_controller(module: str) -> None:
    bad = {name: by for name, by in closure(module).items() if _under(name, CONTROLLER_ONLY)}
    assert not bad, f"{module} reaches controller-side code: " + ", ".join(
        f"{n} (via {b})" for n, b in sorted(bad.items())
    )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("ct_fleet.protocol")))
def test_the_protocol_imports_no_aws_sdk(module: str) -> None:
    bad = {name: by for name, by in closure(module).items() if _under(name, ("boto3", "botocore", "aiobotocore"))}
    assert not bad, f"{module} imports an AWS SDK: {bad}"


def test_the_top_level_package_imports_nothing_eagerly() -> None:
    """`import ct_fleet` (which every worker process does) must not load the controller."""
    assert {_own(name) for name in direct_imports("ct_fleet")} <= {None}


CLOUD_NAMES = {"EmbeddedCloud", "AwsCloud", "embedded"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("ct_fleet.cloud")))
def test_only_the_cloud_package_knows_which_cloud_it_is(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {
        a.name.rpartition(".")[2]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    kinds = {
        c.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        for c in [n.left, *n.comparators]
        if isinstance(c, ast.Constant) and c.value in ("embedded", "aws")
    }
    assert not (names & CLOUD_NAMES) and not kinds, (
        f"{module} branches on the cloud: {sorted(names & CLOUD_NAMES) + sorted(kinds)}"
    )


INSPECT_PRIVATE = "ct_fleet.inspect_private"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != INSPECT_PRIVATE))
def test_only_the_adapter_uses_inspects_private_api(module: str) -> None:
    bad = private_inspect_imports(ast.parse(MODULES[module].read_text()))
    assert not bad, f"{module} imports Inspect's private API ({', '.join(bad)}): go through {INSPECT_PRIVATE}"


def test_the_rule_can_fail(tmp_path: Path) -> None:
    """The checker sees a forbidden import (guards against a rule that passes vacuously)."""
    tree = ast.parse("from ..controller import plan\nimport boto3\n")
    found = _imports_of(tree, "ct_fleet.worker.loop", False)
    assert "ct_fleet.controller" in found and "boto3" in found
    assert _under("ct_fleet.controller.plan", CONTROLLER_ONLY)
    private = ast.parse(
        "from inspect_ai._eval.loader import load_tasks\n"
        "import inspect_ai._util.zipfile\n"
        "from inspect_ai.scorer import _metric, Score\n"
        "from inspect_ai import __version__, eval\n"
        "if TYPE_CHECKING:\n    from inspect_ai.log._log import EvalSampleReductions\n"
        "def f():\n    importlib.import_module('inspect_ai._util.error')\n"
    )
    assert private_inspect_imports(private) == [
        "inspect_ai._eval.loader",
        "inspect_ai._eval.loader.load_tasks",
        "inspect_ai._util.error",
        "inspect_ai._util.zipfile",
        "inspect_ai.log._log",
        "inspect_ai.log._log.EvalSampleReductions",
        "inspect_ai.scorer._metric",
    ]


UNDER_THE_CONTROLLER = sorted(m for m in MODULES if _under(m, ("ct_fleet.cloud", "ct_fleet.services")))


@pytest.mark.parametrize("module", UNDER_THE_CONTROLLER)
def test_cloud_and_services_never_reach_the_controller(module: str) -> None:
    bad = {name: by for name, by in closure(module).items() if _under(name, ("ct_fleet.controller", "ct_fleet.cli"))}
    assert not bad, f"{module} reaches up into: " + ", ".join(f"{n} (via {b})" for n, b in sorted(bad.items()))


PARTS = ("ct_fleet.controller.planning", "ct_fleet.controller.fleet", "ct_fleet.controller.reporting")
# Which parts a part may import (its own modules aside).
MAY_IMPORT = {
    "ct_fleet.controller.planning": set(),
    "ct_fleet.controller.reporting": {"ct_fleet.controller.planning"},
    "ct_fleet.controller.fleet": {"ct_fleet.controller.planning", "ct_fleet.controller.reporting"},
}


def _from_targets(module: str, with_types: bool = False) -> set[str]:
    """The modules a module's import statements name (`from X import y` names X, or X.y when
    y is a module), at module level and in functions; type-only imports (under
    TYPE_CHECKING) only when with_types is true."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not with_types:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            prefix = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*prefix, node.module] if node.module else prefix)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name.startswith("ct_fleet")}


def _part(module: str) -> str | None:
    return next((p for p in PARTS if _under(module, (p,))), None)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, ("ct_fleet.cli",))))
def test_the_cli_imports_only_the_controllers_faces(module: str) -> None:
    bad = {t for t in _from_targets(module) if _under(t, ("ct_fleet.controller",)) and t not in PARTS}
    assert not bad, f"{module} imports controller internals {sorted(bad)}: import from {', '.join(PARTS)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m)))
def test_each_part_imports_only_the_parts_below_it(module: str) -> None:
    own = _part(module)
    assert own is not None
    used = {_part(t) for t in _from_targets(module)} - {None, own}
    assert used <= MAY_IMPORT[own], f"{module} ({own}) imports {sorted(used - MAY_IMPORT[own])}"
    outside = {t for t in _from_targets(module) if _under(t, PARTS) and _part(t) != own and t not in PARTS}
    assert not outside, f"{module} imports other parts' internals {sorted(outside)}: use their faces"


def test_no_import_circle() -> None:
    """Type-only imports count: two modules that need each other's types are one part."""
    graph = {m: {t for t in _from_targets(m, with_types=True) if t in MODULES and t != m} for m in MODULES}
    circles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(MODULES):
        if module not in state:
            walk(module, [module])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_module_strings_name_modules_that_exist() -> None:
    """`python -m ct_fleet.x` and import_module("ct_fleet.x") survive a rename only if x exists."""
    missing = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                args = [a for a in node.args if isinstance(a, ast.List)]
                strings = [e.value for lst in args for e in lst.elts if isinstance(e, ast.Constant)]
                strings = [b for a, b in zip(strings, strings[1:], strict=False) if a == "-m"]
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr == "import_module") and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        strings.append(first.value)
                missing += [f"{module}: {s}" for s in strings if s.startswith("ct_fleet") and s not in MODULES]
    assert not missing, missing


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_and_classes_stay_small(module: str) -> None:
    text = MODULES[module].read_text()
    assert len(text.splitlines()) <= 400, f"{module}: {len(text.splitlines())} lines; split it"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= 250, f"{module}.{node.name}: {size} lines; split it"


def test_the_layer_checks_can_fail() -> None:
    """Each checker sees what it forbids (guards against rules that pass vacuously)."""
    assert _part("ct_fleet.controller.fleet.run") == "ct_fleet.controller.fleet"
    assert "ct_fleet.controller.fleet" not in MAY_IMPORT["ct_fleet.controller.planning"]
    tree = ast.parse('import subprocess\nsubprocess.run(["python", "-m", "ct_fleet.worker.runner"])\n')
    assert "ct_fleet.worker.runner" in _imports_of(tree, "ct_fleet.cli.main", False)


# Where the environment may be read: a process's entry, in the functions named (any
# function of cli/: the CLI is the command-line edge as a whole).
ENV_READERS: dict[str, set[str]] = {
    "ct_fleet.worker.__main__": {"main"},
    "ct_fleet.worker.runner": {"main"},  # a job's process
    "ct_fleet.worker.forkserver": {"main"},  # the warm runner server's entry
    "ct_fleet.worker.forked_job": {"run"},  # a job forked from it
    "ct_fleet.controller.planning.probe_process": {"_become_probe"},  # the probe forked from the controller
    "ct_fleet.settings": {"<main>"},  # `python -m ct_fleet.settings pull`
    "ct_fleet.cloud.moto_server": {"<main>"},  # the embedded cloud's server process (its key)
    "ct_fleet.controller.planning.request": {"_environ"},  # the public API's FleetRequest
    "ct_fleet.environment": {"inherited"},  # what a child process inherits
}


def _is_main_block(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def environment_reads(tree: ast.AST) -> list[tuple[str, int]]:
    """Where a module touches the process environment (os.environ, os.getenv, os.putenv,
    os.unsetenv, os.environb, or those names imported from os): (the enclosing function,
    "<module>" at import time or "<main>" under `if __name__ == "__main__"`, line)."""
    names = {"environ", "environb", "getenv", "putenv", "unsetenv", "getenvb"}
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        elif _is_main_block(node):
            where = "<main>"
        if (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append((where, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in names for a in node.names):
            found.append((where, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "<module>")
    return found


def _env_allowed(module: str, where: str) -> bool:
    if where == "<module>":
        return False
    if _under(module, ("ct_fleet.cli",)):
        return True
    return where in ENV_READERS.get(module, set())


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_environment_is_read_only_where_a_process_starts(module: str) -> None:
    reads = environment_reads(ast.parse(MODULES[module].read_text()))
    bad = [f"line {line} ({where})" for where, line in reads if not _env_allowed(module, where)]
    assert not bad, (
        f"{module} reads the environment at {', '.join(bad)}: take what it needs as an argument, "
        "read once at the process's entry (import time never)"
    )


def test_the_environment_rule_can_fail() -> None:
    tree = ast.parse(
        "import os\nfrom os import getenv\nLEVEL = os.environ.get('X')\n"
        "def f():\n    return os.getenv('Y')\n"
        "if __name__ == '__main__':\n    print(os.environ)\n"
    )
    assert environment_reads(tree) == [("<module>", 2), ("<module>", 3), ("f", 5), ("<main>", 7)]
    assert not _env_allowed("ct_fleet.cli.main", "<module>")
    assert _env_allowed("ct_fleet.cli.main", "main")
    assert not _env_allowed("ct_fleet.services.session", "client")
    assert _env_allowed("ct_fleet.worker.__main__", "main")
    assert not _env_allowed("ct_fleet.worker.__main__", "helper")
