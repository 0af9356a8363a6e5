"""The package's import graph has no cycles, and recipe validation stays light (no torch).

The graph is read from the source with `ast`, not by importing: every `import` and `from ... import`
in a module counts, at top level and inside functions (a lazy import only hides a cycle until the
function runs). Imports under `if TYPE_CHECKING:` are left out: they never run. An edge goes to the
module the statement names (`from leaklab.x import y` executes `leaklab.x`) and, when `y` is itself
a submodule, to `leaklab.x.y` too. Parent packages that are not named are not edges: Python runs
their `__init__` first, but a package importing its own submodules is how packages are built.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = "leaklab"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE


def package_modules(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (packages by their __init__)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST):
    """Every node, skipping the bodies of `if TYPE_CHECKING:` (their `else:` branches run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def imported_modules(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(package module, line) for every import of a module of the package in `name`'s source."""
    is_package = path.name == "__init__.py"
    found = []
    for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # Relative: level 1 is this module's own package (the module itself for an __init__).
                anchor = name.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # `import leaklab.a.b` names leaklab.a.b; the longest known prefix is the module that runs.
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                found.append((".".join(parts), node.lineno))
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported package module: line of the first such import}."""
    modules = package_modules()
    known = set(modules)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imported_modules(name, path, known):
            edges.setdefault(target, line)
        graph[name] = edges
    return graph


def tangles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components that hold a cycle: sets of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, {}):
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a closed path of modules) per tangle."""
    return [_cycle_in(component, graph) for component in tangles(graph)]


def _cycle_in(component: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """The shortest closed path from the component's first module back to itself (breadth first)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle found in strongly connected component {component}")


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join([*steps, cycle[-1]])


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    found = [
        f"{describe(_cycle_in(c, graph), graph)}\n  (modules in this tangle: {', '.join(c)})"
        for c in tangles(graph)
    ]
    assert not found, "import cycles in leaklab/ (module (line of its import) -> ...):\n" + "\n".join(found)


def test_the_graph_reader_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "leaklab"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from leaklab.sub import b\n")  # lazy, submodule by name
    (pkg / "sub" / "__init__.py").write_text("from . import c\n")  # relative, from a package
    (pkg / "sub" / "b.py").write_text("import leaklab.a\n")
    (pkg / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from leaklab.a import f\nfrom .b import x\n"
    )
    modules = package_modules(pkg)
    known = set(modules)
    graph = {n: dict(imported_modules(n, p, known)) for n, p in modules.items()}
    assert set(graph["leaklab.a"]) == {"leaklab.sub", "leaklab.sub.b"}
    assert set(graph["leaklab.sub"]) == {"leaklab.sub.c"}
    assert set(graph["leaklab.sub.c"]) == {"leaklab.sub.b"}  # the TYPE_CHECKING import is not an edge
    assert find_cycles(graph) == [["leaklab.a", "leaklab.sub.b", "leaklab.a"]]


def _loaded_by(module: str, names: list[str]) -> list[str]:
    """Which of `names` a fresh interpreter has loaded after importing `module`."""
    code = f"import sys, {module}; print(*[n for n in {names!r} if n in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def _imports_torch(module: str) -> bool:
    return bool(_loaded_by(module, ["torch"]))


def test_recipe_validation_does_not_import_torch():
    assert not _imports_torch("leaklab.recipe")


def test_recipe_validation_does_not_load_the_mri_set_builders():
    # Every command loads the recipe; these only build MRI sets or compare texts, so they load when used.
    builders = [f"leaklab.perturb.{m}" for m in ("mri_llm", "mutation", "unittest_rewrite", "examples")]
    assert _loaded_by("leaklab.recipe", [*builders, "rapidfuzz"]) == []


def test_the_stage_registry_does_not_import_torch():
    assert not _imports_torch("leaklab.training.stages")
