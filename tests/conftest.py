"""Shared fixtures. Tests run against the real catalog snapshots, bundled configs and rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def catalogs():
    """Every shipped catalog snapshot."""
    from servetune.catalog import available_versions, load_catalog

    return [load_catalog(v) for v in available_versions()]


@pytest.fixture(scope="session")
def builtin_rules(catalogs):
    """The built-in rule set."""
    from servetune.rules.loader import load_rules

    return load_rules(catalogs=catalogs)


def run_cli(
    *args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run `python -m servetune ARGS` as a real subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "servetune", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )
