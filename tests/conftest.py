"""Shared fixtures. Tests run against the real catalog snapshots, bundled configs and rules."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_configure(config):
    """The signal tests send SIGINT to commands started as a user's terminal starts them, with SIGINT,
    SIGQUIT and SIGHUP at their default. A suite started as a background job of a non-interactive shell
    (`bash scripts/test.sh &`) inherits SIGINT and SIGQUIT ignored, under nohup SIGHUP too, and every
    child would as well: servetune
    rightly keeps a signal ignored that was ignored at its start, so those tests would test the
    harness, not the command. Catching them here gives the children the default action again (exec
    resets caught signals, not ignored ones)."""
    for sig, handler in (
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGQUIT, signal.SIG_DFL),
        (signal.SIGHUP, signal.SIG_DFL),
    ):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, handler)


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


def load_script(relative: str):
    """The module of a script in the repository (`scripts/gen_docs.py`, `benchmarks/replay_verdicts.py`): scripts
    are not packages, so tests load them from their file."""
    import importlib.util

    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
