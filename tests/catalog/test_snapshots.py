"""What the shipped snapshots say about the fields servetune's rules depend on."""

from __future__ import annotations

import pytest

from servetune.catalog import available_versions, catalog_dir, dump_catalog, load_catalog


def test_0_5_23_matches_the_reference():
    """The facts sglang-reference.md states about 0.5.23."""
    cat = load_catalog("0.5.23")
    fields = cat.fields
    assert "cuda_graph_max_bs_decode" in fields and "cuda_graph_max_bs" not in fields
    assert fields["mm_feature_transport"].choices == ["cpu", "cuda_ipc", "cuda_vmm"]
    assert fields["mm_feature_transport"].resolvable
    assert fields["radix_eviction_policy"].resolvable and fields["radix_eviction_policy"].default == "lru"
    assert "priority" in fields["radix_eviction_policy"].choices
    dp_encoder = fields["mm_enable_dp_encoder"]
    assert (dp_encoder.action, dp_encoder.config_file_ok, dp_encoder.default) == ("boolean_optional", False, None)
    assert fields["tp_size"].aliases == ["--tensor-parallel-size"]
    assert fields["cuda_graph_bs_decode"].nargs == "+" and fields["cuda_graph_bs_decode"].type == "int"
    for name in ("mem_fraction_static", "chunked_prefill_size", "max_running_requests", "cuda_graph_max_bs_decode"):
        assert not fields[name].resolvable, name
    assert cat.env["SGLANG_USE_IPC_POOL_HANDLE_CACHE"].model_dump() == {
        "name": "SGLANG_USE_IPC_POOL_HANDLE_CACHE",
        "type": "bool",
        "default": True,
    }
    assert cat.env["SGLANG_MM_FEATURE_CACHE_MB"].default == 1024
    assert cat.env["SGLANG_VLM_CACHE_SIZE_MB"].default == 100


@pytest.mark.parametrize(
    ("name", "present_in"),
    [
        ("mm_feature_transport", {"0.5.17", "0.5.23"}),
        ("prefill_decode_interval", {"0.5.23"}),
        ("cuda_graph_max_bs_decode", {"0.5.17", "0.5.23"}),
        ("cuda_graph_max_bs", {"0.5.10"}),
        ("decode_attention_backend", {"0.5.10", "0.5.17", "0.5.23"}),
        ("mm_preprocess_cache_size_mb", {"0.5.23"}),
    ],
)
def test_fields_appear_in_the_releases_that_have_them(name, present_in):
    """The version table that the rules' SGLang windows rely on."""
    have = {v for v in ("0.5.10", "0.5.17", "0.5.23") if name in load_catalog(v).fields}
    assert have == present_in


def test_the_priority_radix_policy_arrived_in_0_5_17():
    """`--radix-eviction-policy priority` is a choice from 0.5.17 on."""
    choices = {v: load_catalog(v).fields["radix_eviction_policy"].choices for v in ("0.5.10", "0.5.17", "0.5.23")}
    assert "priority" not in choices["0.5.10"]
    assert "priority" in choices["0.5.17"] and "priority" in choices["0.5.23"]


@pytest.mark.parametrize("version", available_versions())
def test_snapshots_are_in_canonical_form(version):
    """Each file is the canonical dump of its model (sorted keys), so sync output diffs cleanly."""
    text = catalog_dir().joinpath(f"{version}.json").read_text(encoding="utf-8")
    assert dump_catalog(load_catalog(version)) == text
    assert load_catalog(version).sglang_version == version


@pytest.mark.parametrize("version", available_versions())
def test_every_field_is_named_by_its_flag_or_an_alias(version):
    """Each field has a `--` flag and no two fields share a spelling."""
    seen: dict[str, str] = {}
    for spec in load_catalog(version).fields.values():
        assert spec.flag.startswith("--")
        for spelling in (spec.flag, *spec.aliases):
            assert seen.setdefault(spelling, spec.name) == spec.name, spelling
