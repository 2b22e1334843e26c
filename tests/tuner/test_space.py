"""Search spaces: compact CLI form, YAML, catalog checks with did-you-mean, pins, baseline mapping."""

from __future__ import annotations

import pytest

from servetune.errors import SpecError, UnknownNameError
from servetune.schema.catalog import Catalog, EnvSpec, FieldSpec
from servetune.schema.space import ChoiceDistribution, FloatDistribution, IntDistribution
from servetune.tuner._params import baseline_params
from servetune.tuner.space import build_space, load_shipped_space, parse_compact, shipped_spaces

CATALOG = Catalog(
    sglang_version="0.5.23",
    fields={
        "max_running_requests": FieldSpec(name="max_running_requests", flag="--max-running-requests", type="int"),
        "mem_fraction_static": FieldSpec(name="mem_fraction_static", flag="--mem-fraction-static", type="float"),
        "schedule_policy": FieldSpec(name="schedule_policy", flag="--schedule-policy", choices=["fcfs", "lpm", "lof"]),
        "chunked_prefill_size": FieldSpec(name="chunked_prefill_size", flag="--chunked-prefill-size", type="int"),
        "enable_mixed_chunk": FieldSpec(
            name="enable_mixed_chunk", flag="--enable-mixed-chunk", type="bool", action="store_true"
        ),
    },
    env={"SGLANG_VLM_CACHE_SIZE_MB": EnvSpec(name="SGLANG_VLM_CACHE_SIZE_MB", type="int")},
)


def test_compact_forms_parse_into_the_yaml_models():
    assert parse_compact("max_running_requests=int(32,512,log)") == (
        "max_running_requests",
        IntDistribution.model_validate({"int": [32, 512], "log": True}),
    )
    name, dist = parse_compact("mem_fraction_static=float(0.7, 0.9, step=0.01)")
    assert isinstance(dist, FloatDistribution) and dist.bounds == (0.7, 0.9) and dist.step == 0.01
    name, dist = parse_compact("schedule_policy=choice(fcfs,lpm)")
    assert isinstance(dist, ChoiceDistribution) and dist.choices == ("fcfs", "lpm")
    _, dist = parse_compact("enable_mixed_chunk=choice(true,false,null)")
    assert dist.choices == (True, False, None)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("max_running_requests=int(32)", "two bounds"),
        ("max_running_requests=int(512,32)", "low <= high"),
        ("max_running_requests=int(0,8,log)", "log: true"),
        ("max_running_requests=ints(1,2)", "cannot parse"),
        ("x=float(1,2,stp=1)", "unknown option"),
    ],
)
def test_bad_compact_forms_say_what_to_write(text, fragment):
    with pytest.raises(SpecError) as err:
        parse_compact(text)
    assert fragment in err.value.render()


def test_unknown_field_gets_a_did_you_mean():
    with pytest.raises(UnknownNameError) as err:
        build_space(catalog=CATALOG, space_sets=["max_runing_requests=int(1,8)"])
    assert "did you mean 'max_running_requests'" in err.value.render()
    with pytest.raises(UnknownNameError) as err:
        build_space(catalog=CATALOG, space_sets=["SGLANG_VLM_CACHE_SIZE=int(0,8)"])
    assert "SGLANG_VLM_CACHE_SIZE_MB" in err.value.render()


def test_choices_are_checked_against_sglang_choices():
    with pytest.raises(SpecError, match="not among SGLang's choices"):
        build_space(catalog=CATALOG, space_sets=["schedule_policy=choice(fcfs,lifo)"])


def test_pinned_fields_are_left_out_and_reported():
    space = build_space(
        catalog=CATALOG,
        pinned={"max_running_requests"},
        space_sets=["max_running_requests=int(1,8)", "mem_fraction_static=float(0.7,0.9)"],
    )
    assert list(space.params) == ["mem_fraction_static"]
    assert "pinned" in space.dropped["max_running_requests"]


def test_shipped_default_drops_fields_the_version_lacks_but_user_fields_must_exist():
    default = ("text", load_shipped_space("text"))
    space = build_space(catalog=CATALOG, default=default)
    assert "cuda_graph_max_bs_decode" in space.dropped and "max_running_requests" in space.params
    with pytest.raises(UnknownNameError):
        build_space(
            catalog=CATALOG, workload_tune={"cuda_graph_max_bs_decode": IntDistribution.model_validate({"int": [1, 2]})}
        )


def test_shipped_spaces_cover_the_named_topics():
    assert {"text", "multimodal"} <= set(shipped_spaces())
    mm = load_shipped_space("multimodal")
    for name in (
        "max_running_requests",
        "mem_fraction_static",
        "cuda_graph_max_bs_decode",
        "chunked_prefill_size",
        "mm_feature_transport",
        "SGLANG_VLM_CACHE_SIZE_MB",
        "prefill_decode_interval",
    ):
        assert name in mm


def test_baseline_values_map_into_the_space_or_are_recorded_as_fixed():
    space = build_space(
        catalog=CATALOG,
        space_sets=[
            "max_running_requests=int(32,512,log)",
            "mem_fraction_static=float(0.7,0.9,step=0.05)",
            "schedule_policy=choice(fcfs,lpm)",
            "SGLANG_VLM_CACHE_SIZE_MB=choice(0,100)",
            "chunked_prefill_size=choice(null,2048)",
        ],
    )
    params, fixed = baseline_params(
        space, {"max_running_requests": 1024, "mem_fraction_static": 0.85, "SGLANG_VLM_CACHE_SIZE_MB": "0"}
    )
    assert params == {"mem_fraction_static": 0.85, "SGLANG_VLM_CACHE_SIZE_MB": 0, "chunked_prefill_size": None}
    assert fixed == {"max_running_requests": 1024, "schedule_policy": None}


def test_a_presets_tune_block_joins_the_space(tmp_path):
    """`--preset FILE` with a `tune:` block adds its dimensions (shipped presets too)."""
    from servetune.tuner._setup import preset_tune

    preset = tmp_path / "p.yaml"
    preset.write_text(
        "name: p\nsummary: s\nset: {schedule_policy: lpm}\ntune:\n  chunked_prefill_size: {choice: [2048, 4096]}\n"
    )
    space = build_space(
        catalog=CATALOG, preset_tune=preset_tune(str(preset)), space_sets=["mem_fraction_static=float(0.7,0.9)"]
    )
    assert set(space.params) == {"chunked_prefill_size", "mem_fraction_static"}
    assert preset_tune("text-chat-latency")["max_running_requests"] == IntDistribution(int=(32, 256), log=True)


def test_a_shipped_workloads_space_drops_fields_an_older_release_lacks(catalogs):
    """The shipped single-image-stream tune: block names 0.5.23 fields; for 0.5.17 they are dropped
    with a note (seen on the H200), while the same names in a user's own workload stay errors."""
    from servetune.bench.workloads import load_workload

    old = next(c for c in catalogs if c.sglang_version == "0.5.17")
    block = load_workload("single-image-stream").tune
    assert "prefill_decode_interval" in block
    space = build_space(catalog=old, workload_tune=block, shipped_blocks=["workload"])
    assert (
        "prefill_decode_interval" not in space.params
        and "not in SGLang 0.5.17" in space.dropped["prefill_decode_interval"]
    )
    with pytest.raises(UnknownNameError):
        build_space(catalog=old, workload_tune=block)


def test_the_capacity_space_for_vlm_traffic_holds_its_levers_in_every_release_it_names():
    """`--space capacity-vlm`: a shipped space by name; every field exists in SGLang 0.5.17 and 0.5.23
    (nothing dropped), and the graph size is a range the server model can narrow, not a choice list."""
    from servetune.catalog import load_catalog
    from servetune.tuner.space import load_space_file

    space = load_space_file("capacity-vlm")
    assert space == load_shipped_space("capacity-vlm")
    levers = {"max_running_requests", "cuda_graph_max_bs_decode", "chunked_prefill_size", "enable_mixed_chunk",
              "schedule_conservativeness", "mm_processor_worker_num", "mem_fraction_static"}  # fmt: skip
    assert set(space) == levers
    assert isinstance(space["cuda_graph_max_bs_decode"], IntDistribution) and space["cuda_graph_max_bs_decode"].log
    for version in ("0.5.17", "0.5.23"):
        built = build_space(catalog=load_catalog(version), space_file="capacity-vlm")
        assert set(built.params) == levers and not built.dropped
