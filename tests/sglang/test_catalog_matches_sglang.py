"""The shipped catalogs are exactly what `servetune catalog sync` reads from each installed release."""

from __future__ import annotations

import difflib

import pytest

from servetune.catalog import available_versions, catalog_dir, sync


@pytest.mark.parametrize("version", available_versions())
def test_the_shipped_catalog_is_what_sglang_reports(tmp_path, sglang_versions, version):
    """Regenerating a snapshot from the installed release gives the shipped file, byte for byte."""
    if version not in sglang_versions:
        pytest.skip(f"SGLang {version} is not in the harness; run SERVETUNE_SGLANG_VERSIONS={version} scripts/setup_sglang_cpu.sh")
    fresh = sync(out_dir=tmp_path, harness_version=version).read_text(encoding="utf-8")
    shipped = catalog_dir().joinpath(f"{version}.json").read_text(encoding="utf-8")
    if fresh != shipped:
        diff = "".join(difflib.unified_diff(shipped.splitlines(True), fresh.splitlines(True), "shipped", "sglang", n=1))
        pytest.fail(f"servetune/data/catalog/{version}.json is stale; run `servetune catalog sync --sglang-cpu {version}`\n"
                    + diff[:4000])
