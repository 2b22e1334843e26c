"""The shipped catalogs are exactly what `servetune catalog sync` reads from each installed release."""

from __future__ import annotations

import difflib
import json

import pytest

from servetune.catalog import available_versions, catalog_dir, load_catalog, sync
from tests.sglang.oracle import parse_argvs


@pytest.mark.parametrize("version", available_versions())
def test_the_shipped_catalog_is_what_sglang_reports(tmp_path, sglang_versions, version):
    """Regenerating a snapshot from the installed release gives the shipped file, byte for byte."""
    if version not in sglang_versions:
        pytest.skip(
            f"SGLang {version} is not in the harness; "
            f"run SERVETUNE_SGLANG_VERSIONS={version} scripts/setup_sglang_cpu.sh"
        )
    fresh = sync(out_dir=tmp_path, harness_version=version).read_text(encoding="utf-8")
    shipped = catalog_dir().joinpath(f"{version}.json").read_text(encoding="utf-8")
    if fresh != shipped:
        diff = "".join(difflib.unified_diff(shipped.splitlines(True), fresh.splitlines(True), "shipped", "sglang", n=1))
        pytest.fail(
            f"servetune/data/catalog/{version}.json is stale; run `servetune catalog sync --sglang-cpu {version}`\n"
            + diff[:4000]
        )


def _yaml_value(spec) -> str:
    if spec.action in ("store_true", "boolean_optional", "store_const", "store_false"):
        return "true"
    sample = {"int": "1", "float": "0.5", "bool": "true", "json": "'{}'"}.get(spec.type, "x")
    if spec.choices:
        sample = json.dumps(spec.choices[0])
    return f"[{sample}]" if spec.nargs in ("+", "*") else sample


@pytest.mark.parametrize("version", available_versions())
def test_config_file_ok_is_what_sglangs_yaml_merger_does(tmp_path, sglang_versions, version):
    """Every field marked argv-only, and every 20th other field, behaves so in SGLang's `--config`."""
    if version not in sglang_versions:
        pytest.skip(f"SGLang {version} is not in the harness")
    specs = sorted(load_catalog(version).fields.values(), key=lambda s: s.name)
    sample = [s for i, s in enumerate(specs) if not s.config_file_ok or i % 20 == 0]
    argvs = []
    for spec in sample:
        path = tmp_path / f"{spec.name}.yaml"
        path.write_text(f"{spec.flag[2:]}: {_yaml_value(spec)}\n", encoding="utf-8")
        argvs.append(["--model-path", "m", "--config", str(path)])
    answers = parse_argvs(version, argvs)
    wrong = [
        (s.name, s.config_file_ok, a["error"])
        for s, a in zip(sample, answers)
        if ("Unsupported config option" in (a["error"] or "")) == s.config_file_ok
    ]
    assert not wrong
