"""The package's shape, checked as its layering is (tests/test_layering.py, the import contracts): short
functions where people add things, and Optuna only through its public API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "servetune"
MAX_LINES = 80


@pytest.mark.parametrize("package", ["cli", "tuner"])
def test_no_function_in_the_cli_or_the_tuner_runs_over_80_lines(package):
    """Commands and the study are where options, objectives and moves get added: a function longer
    than a screen hides where the new piece goes. Long option lists live on the settings dataclasses
    (`servetune.settings`), not in signatures."""
    long = []
    for path in sorted((PACKAGE / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
