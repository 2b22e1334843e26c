"""Packaging: every code folder is a regular package (setuptools' find skips namespace folders,
so a non-editable install would lose it), and the data files are found as package data."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import servetune

ROOT = Path(servetune.__file__).resolve().parent


def test_every_code_folder_has_an_init():
    """A folder of Python modules under servetune/ without __init__.py would be left out of the wheel."""
    missing = [
        str(d.relative_to(ROOT))
        for d in ROOT.rglob("*")
        if d.is_dir()
        and "data" not in d.relative_to(ROOT).parts
        and d.name != "__pycache__"
        and any(d.glob("*.py"))
        and not (d / "__init__.py").exists()
    ]
    assert not missing, missing


def test_data_files_are_reachable_as_package_data():
    """Catalogs, rules, presets, workloads, models and GPU profiles ship inside the package."""
    data = resources.files("servetune.data")
    for name in (
        "catalog/0.5.23.json",
        "rules/qwen3_vl_hopper.yaml",
        "presets/multimodal-high-concurrency.yaml",
        "workloads/single-image-stream.yaml",
        "models/qwen3-vl-8b-instruct/config.json",
        "gpus.yaml",
    ):
        assert data.joinpath(name).is_file(), name
