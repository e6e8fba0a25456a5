"""Layers import downward only: format → log → policy → maintenance → tools/cli (architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kafkalog"
RANK = {"errors": 0, "format": 1, "log": 2, "policy": 3, "maintenance": 4, "tools": 5, "cycle": 6, "airflow": 7,
        "cli": 8}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_point_down_only() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(relative.parts)
        own = _layer(module)
        if own not in RANK:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kafkalog."):
                target = _layer(node.module)
                if target in RANK and RANK[target] > RANK[own]:
                    violations.append(f"{module} imports {node.module}")
    assert violations == []


def test_format_layer_touches_no_files_or_clock() -> None:
    for path in (PACKAGE / "format").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"os", "time", "pathlib", "shutil"}, path.name


def test_the_cycle_and_the_provider_import_nothing_heavy() -> None:
    """Every Airflow component imports the provider (its hook, operators, plugin) and the DAGs import the
    cycle's steps at parse time: none of them may pull in numba, pyspark or the log layer's kernels at
    module level (the work imports them where it runs)."""
    import subprocess
    import sys

    modules = sorted(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
                     for package in ("cycle", "airflow") for p in (PACKAGE / package).glob("*.py"))
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "heavy = ('numba', 'pyspark', 'numpy', 'kafkalog.format.batch', 'kafkalog.log.segment', "
            "'kafkalog.log.local_log')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "kafkalog.cycle.steps" in modules and "kafkalog.airflow.ui_plugin" in modules
