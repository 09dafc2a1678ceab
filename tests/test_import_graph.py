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
