"""Layers import downward only: format → log → policy → maintenance → tools/cli (architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kafkalog"
RANK = {"errors": 0, "format": 1, "log": 2, "policy": 3, "maintenance": 4, "tools": 5, "pipeline": 6, "airflow": 7,
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
