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


PRIVATE_OPTUNA = {"_storage", "_trial_id", "_study_id", "_get_trials", "_system_attrs", "_cached_frozen_trial"}
"""Optuna's private names a tuner is tempted by (what servetune used before it went through the
public storage API: `get_study_id_from_name`, `get_trial_id_from_study_id_trial_number`, `get_trials`)."""


def test_optuna_is_used_through_its_public_api_but_for_the_samplers_documented_view():
    """No private Optuna attribute read or set in servetune/ except the sampler's two
    (`_sampler.OPTUNA_PRIVATE`, each with the reason there); an attribute of servetune's own objects
    (`self._storage`) does not count."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_OPTUNA and not own:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .{node.attr}")
    allowed = [f for f in found if f.startswith("tuner/_sampler.py")]
    assert found == allowed, [f for f in found if f not in allowed]
    assert sorted(f.split(": ")[1] for f in allowed) == ["._get_trials", "._system_attrs", "._system_attrs"]


def test_the_private_optuna_names_the_sampler_relies_on_still_exist():
    """Fails on the Optuna release that drops them: then the sampler's view needs another way in."""
    import optuna

    from servetune.tuner._sampler import OPTUNA_PRIVATE

    assert OPTUNA_PRIVATE == ("Study._get_trials", "FrozenTrial._system_attrs")
    assert callable(getattr(optuna.study.Study, "_get_trials", None))
    trial = optuna.trial.create_trial(value=1.0, params={}, distributions={})
    assert isinstance(trial._system_attrs, dict)


def test_only_the_cli_may_import_typer_and_the_contract_says_so_for_every_module():
    """The import contract `options-declare-only` names every top-level module and package but the CLI,
    so a new package cannot slip under it (lint-imports then enforces it in scripts/test.sh)."""
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "options-declare-only"]
    present = {
        f"servetune.{p.stem if p.is_file() else p.name}"
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").is_file()
    }
    assert set(contract["source_modules"]) == present - {"servetune.cli"}
