"""The direction of imports: rla_core < tasks < flows. No module imports one on a higher floor (tasks/
never imports flows/), and no two modules import each other, directly or through others — counting
imports inside functions too (bench/import_graph.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _graph_tool():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "bench" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_points_up_a_floor_and_there_is_no_circle():
    tool = _graph_tool()
    graph = tool.arrows(ROOT)
    floor = {package: n for n, package in enumerate(tool.PACKAGES)}
    up = sorted((a, b) for a, targets in graph.items() for b in targets
                if floor[b.split(".")[0]] > floor[a.split(".")[0]])
    assert up == []
    assert tool.circles(graph) == []


def test_the_tool_sees_an_import_inside_a_function_and_a_circle(tmp_path):
    """The check can fail: a planted upward import inside a function and a two-module circle are found."""
    tool = _graph_tool()
    for package in tool.PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "tasks" / "a.py").write_text("def f():\n    from flows import x\n")
    (tmp_path / "flows" / "x.py").write_text("import flows.y\n")
    (tmp_path / "flows" / "y.py").write_text("from flows import x\n")
    graph = tool.arrows(tmp_path)
    assert "flows.x" in graph["tasks.a"]
    assert tool.circles(graph) == [["flows.x", "flows.y"]]


def _sources():
    for package in ("rla_core", "tasks", "flows", "rla_bench"):
        yield from sorted((ROOT / package).rglob("*.py"))


def test_no_file_over_400_lines_and_no_function_over_60_without_the_reason_beside_it():
    import ast

    long_files, long_functions = [], []
    for path in _sources():
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > 400 and "# Over 400 lines: " not in text:
            long_files.append((str(path.relative_to(ROOT)), len(lines)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if not lines[first - 2].startswith("# Over 60 lines: "):
                    long_functions.append((str(path.relative_to(ROOT)), node.name))
    assert long_files == [] and long_functions == []
