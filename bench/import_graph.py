"""The project's import graph: files, floors (rla_core < tasks < flows), arrows between project
modules (any import, top-level or inside a function; a package's implicit import by its submodules
is not an arrow), arrows that point up a floor, and circles.

    python bench/import_graph.py [ROOT]      # ROOT defaults to the repository
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("rla_core", "tasks", "flows")  # floors, lowest first


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def arrows(root: Path) -> dict[str, set[str]]:
    mods = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only:  # annotations only: no import at run time
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` is an arrow to the submodule; other names are the module's own
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs + ([node.module] if len(subs) < len(node.names) else [])
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] in PACKAGES:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main(root: Path) -> None:
    graph = arrows(root)
    floor = {name: PACKAGES.index(name.split(".")[0]) for name in graph}
    up = [(a, b) for a, targets in graph.items() for b in targets if floor[b] > floor[a]]
    lines = {p: sum(1 for path in (root / p).rglob("*.py") for _ in path.open()) for p in PACKAGES}
    per_package = {p: sum(n.split(".")[0] == p for n in graph) for p in PACKAGES}
    print(f"files: {len(graph)} ({', '.join(f'{p} {n}' for p, n in per_package.items())})")
    print(f"lines: {', '.join(f'{p} {n}' for p, n in lines.items())}")
    print(f"arrows: {sum(len(t) for t in graph.values())}; pointing up a floor: {len(up)} {up}")
    found = circles(graph)
    print(f"circles: {len(found)} {found}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
