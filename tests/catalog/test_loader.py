"""Loading catalog snapshots, looking names up, and the errors users see."""

from __future__ import annotations

import pytest

import servetune.catalog as catalog_mod
from servetune.catalog import (
    available_versions,
    default_version,
    env_var,
    field,
    field_for_flag,
    load_catalog,
    version_key,
)
from servetune.errors import UnknownNameError


def test_versions_sort_numerically_not_as_text():
    """0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.23."""
    assert sorted(["0.5.23", "0.5.10.post1", "0.5.9", "0.5.10"], key=version_key) == [
        "0.5.9",
        "0.5.10",
        "0.5.10.post1",
        "0.5.23",
    ]
    assert available_versions() == sorted(available_versions(), key=version_key)


def test_the_three_supported_releases_are_shipped():
    """Snapshots for 0.5.10, 0.5.17 and 0.5.23 ship with the package."""
    assert {"0.5.10", "0.5.17", "0.5.23"} <= set(available_versions())


def test_an_unknown_version_lists_the_available_ones_and_suggests_one():
    """The message names the missing version, every available one, a guess and the fix."""
    with pytest.raises(UnknownNameError) as info:
        load_catalog("0.5.2")
    assert info.value.render() == (
        "error[unknown-name]: no SGLang field catalog for version '0.5.2'; available: "
        + ", ".join(available_versions())
        + "\n   = help: did you mean '0.5.23'? to add a release, run `servetune catalog sync --sglang-cpu VERSION` "
        "(after `SERVETUNE_SGLANG_VERSIONS=VERSION scripts/setup_sglang_cpu.sh`)"
    )


def test_catalogs_are_loaded_once():
    """The same object comes back for the same version."""
    assert load_catalog("0.5.23") is load_catalog("0.5.23")


def test_the_default_version_is_the_installed_one_when_it_has_a_snapshot(monkeypatch):
    """An installed 0.5.17 is the default; an installed release without a snapshot is not."""
    monkeypatch.setattr(catalog_mod, "installed_sglang_version", lambda: "0.5.17")
    assert default_version() == "0.5.17"
    monkeypatch.setattr(catalog_mod, "installed_sglang_version", lambda: "0.4.0")
    assert default_version() == available_versions()[-1]
    monkeypatch.setattr(catalog_mod, "installed_sglang_version", lambda: None)
    assert default_version() == available_versions()[-1]


def test_the_installed_version_is_read_without_importing_sglang():
    """`installed_sglang_version` uses package metadata only (checked in a clean interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys, servetune.catalog as c; c.installed_sglang_version(); c.load_catalog('0.5.23'); "
        "print('sglang' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_flags_aliases_and_negations_find_their_field():
    """Primary flags, aliases, `--no-x` of BooleanOptional fields and `--x=v` all resolve."""
    cat = load_catalog("0.5.23")
    assert field_for_flag(cat, "--tp-size").name == "tp_size"
    assert field_for_flag(cat, "--tensor-parallel-size").name == "tp_size"
    assert field_for_flag(cat, "--no-mm-enable-dp-encoder").name == "mm_enable_dp_encoder"
    assert field_for_flag(cat, "--radix-eviction-policy=lru").name == "radix_eviction_policy"
    assert field_for_flag(cat, "--cuda-graph-max-bs") is None


def test_an_unknown_field_suggests_the_closest_name():
    """A misspelt field gets a did-you-mean and the command that lists fields."""
    with pytest.raises(UnknownNameError) as info:
        field(load_catalog("0.5.23"), "attention_backed")
    assert info.value.render() == (
        "error[unknown-name]: 'attention_backed' is not an SGLang 0.5.23 field\n"
        "   = help: did you mean 'attention_backend'?\n"
        "   = note: names come from servetune/data/catalog/0.5.23.json; `servetune catalog show 0.5.23` lists them"
    )
    with pytest.raises(UnknownNameError, match="is not an SGLang 0.5.23 environment variable"):
        env_var(load_catalog("0.5.23"), "SGLANG_VLM_CACHE_MB")
