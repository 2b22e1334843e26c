"""Tests that run SGLang itself (CPU-only harness). Skipped, with the reason, when it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.catalog._harness import SETUP_COMMAND, harness_root, harness_versions

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Mark every test in this folder `sglang`; skip them when the harness is not installed."""
    installed = harness_versions()
    skip = pytest.mark.skip(reason=f"the CPU-only SGLang harness is missing at {harness_root()}; run {SETUP_COMMAND}")
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.sglang)
        if not installed:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sglang_versions() -> list[str]:
    """The SGLang releases the harness has installed."""
    return harness_versions()
