"""rla_core stays pure: no orchestration, tracking, versioning, validation or storage libraries."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("prefect", "mlflow", "dvc", "great_expectations", "boto3")
PACKAGE = Path(__file__).resolve().parents[2] / "rla_core"


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_module_of_rla_core_imports_a_forbidden_package_anywhere_in_its_source():
    offenders = {str(path.relative_to(PACKAGE.parent)): sorted(_imported_roots(path) & set(FORBIDDEN))
                 for path in PACKAGE.rglob("*.py")}
    assert {path: names for path, names in offenders.items() if names} == {}


def test_importing_every_rla_core_module_loads_none_of_them():
    modules = sorted(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
                     for p in PACKAGE.rglob("*.py"))
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
