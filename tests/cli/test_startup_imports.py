"""The CLI imports nothing heavy: `--help` and `resolve` stay fast (Typer's test_rich_import pattern)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "optuna",
    "pynvml",
    "sglang",
    "torch",
    "transformers",
    "pandas",
    "plotly",
    "matplotlib",
    "numpy",
    "sqlalchemy",
    "httpx",
)

_PROBE = """
import sys
from servetune.cli import app
from servetune.cli._run import run_app
code = run_app(app, sys.argv[1:])
sys.stdout.flush()
print("\\n@@MODULES@@\\n" + "\\n".join(sorted(sys.modules)))
"""


def _modules_after(*args: str) -> tuple[int, set[str], str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60)
    out, _, mods = proc.stdout.partition("@@MODULES@@")
    return proc.returncode, {m.split(".")[0] for m in mods.split()}, proc.stderr + out


def test_help_imports_nothing_heavy():
    """`servetune --help` imports none of the heavy modules."""
    code, mods, out = _modules_after("--help")
    assert code == 0, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_resolve_imports_nothing_heavy():
    """`servetune resolve` (table output) imports none of the heavy modules."""
    code, mods, out = _modules_after(
        "resolve", "--model", "qwen3-vl-8b-instruct", "--gpu", "h200", "--sglang-version", "0.5.23"
    )
    assert code == 0, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_resolve_json_imports_nothing_heavy():
    """`servetune resolve --format json` imports none of the heavy modules either."""
    code, mods, out = _modules_after("resolve", "--model", "qwen3-8b", "--gpu", "l4", "--format", "json")
    assert code == 0, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))
