"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and lint-imports catches a
module planted where it breaks one (run on a copy of the package, never the working tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports() -> str:
    beside_python = Path(sys.executable).with_name("lint-imports")
    found = str(beside_python) if beside_python.exists() else shutil.which("lint-imports")
    if not found:
        pytest.skip("lint-imports (import-linter, in the dev extra) is not installed")
    return found


def _run(cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [_lint_imports(), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """The package's Python files and pyproject.toml, copied into tmp_path."""
    shutil.copytree(
        ROOT / "servetune", tmp_path / "servetune", ignore=shutil.ignore_patterns("__pycache__", "data", "*.pyc")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_keeps_every_import_contract(package_copy):
    """lint-imports passes on the package as it is."""
    proc = _run(package_copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(
    ("planted", "source", "broken"),
    [
        ("servetune/schema/_planted.py", "import yaml\n", "schema imports only pydantic"),
        ("servetune/schema/_planted.py", "from servetune.rules import load_rules\n", "schema imports only pydantic"),
        ("servetune/rules/_planted.py", "def f():\n    from servetune import hardware\n", "rules never import"),
        ("servetune/launch/_planted.py", "from servetune.bench import run_benchmark\n", "launch never imports"),
        ("servetune/tuner/_planted.py", "import servetune.cli\n", "tuner never imports cli"),
        ("servetune/presets/_planted.py", "from servetune.render import render_argv\n", "Layers"),
    ],
)
def test_a_planted_violation_breaks_its_contract(package_copy, planted, source, broken):
    """A module importing against the layering (even lazily, inside a function) fails lint-imports,
    naming the contract and the import."""
    (package_copy / planted).write_text(source, encoding="utf-8")
    proc = _run(package_copy)
    assert proc.returncode != 0, proc.stdout
    broken_part = proc.stdout.split("Broken contracts", 1)[-1]
    assert broken in broken_part
    assert planted[: -len(".py")].replace("/", ".") in broken_part
