"""Every argv servetune emits parses with the target release's real SGLang parser, to the values
servetune decided; and SGLang's --config YAML rendering gives the same values."""

from __future__ import annotations

import itertools
import json

import pytest

from servetune.api import resolve_launch
from servetune.render import render_config_yaml

from .oracle import harness_versions, parse_argvs

GPUS = ["h200", "h100-sxm:8", "a100-40gb", "l4", "b200"]
MODELS = [
    "qwen3-vl-8b-instruct",
    "qwen3-vl-30b-a3b-instruct",
    "qwen2.5-vl-3b-instruct",
    "llama-3.1-8b-instruct",
    "qwen3-8b",
]
PINS = [
    [],
    ["max_running_requests=512"],
    ["max_running_requests=400", "radix_eviction_policy=lru", "schedule_policy=lpm"],
    ["mem_fraction_static=0.85", "chunked_prefill_size=4096", "tp_size=2"],
    ["disable_radix_cache=true", "stream_interval=4"],
]
WORKLOADS = [None, "cached-images"]


def _equal(ours, theirs) -> bool:
    if isinstance(ours, float) or isinstance(theirs, float):
        return theirs is not None and abs(float(ours) - float(theirs)) < 1e-9
    if isinstance(ours, (dict, list)):
        return json.dumps(ours, sort_keys=True) == json.dumps(theirs, sort_keys=True)
    return ours == theirs or str(ours) == str(theirs)


def _resolutions(version: str):
    out = []
    for gpu, model, pins, workload in itertools.product(GPUS, MODELS, PINS, WORKLOADS):
        from servetune.catalog import load_catalog

        catalog = load_catalog(version)
        pins = [p for p in pins if p.split("=")[0] in catalog.fields]
        if "tp_size=2" in pins and ":" not in gpu:
            gpu = f"{gpu}:2"  # a launch over two GPUs is for a node that has them
        out.append(resolve_launch(model, gpu=gpu, sglang_version=version, sets=pins, workload=workload))
    return out


@pytest.mark.parametrize("version", ["0.5.10", "0.5.17", "0.5.23"])
def test_every_emitted_argv_parses_to_the_decided_values(version):
    """SGLang `version`'s own parser accepts each argv and reads back every decided field."""
    if version not in harness_versions():
        pytest.fail(f"SGLang {version} is not in the harness; run scripts/setup_sglang_cpu.sh")
    unique: dict[tuple, object] = {}
    for res in _resolutions(version):
        unique.setdefault(tuple(res.argv()), res)
    assert len(unique) >= 20
    resolutions = list(unique.values())
    argvs = [list(a) for a in unique]
    results = parse_argvs(version, argvs)
    bad = []
    for res, argv, result in zip(resolutions, argvs, results):
        if not result["ok"]:
            bad.append((argv, result["error"]))
            continue
        for field, value in res.requested().items():
            if not _equal(value, result["values"].get(field)):
                bad.append((argv, field, value, result["values"].get(field)))
    assert not bad, "\n".join(map(str, bad[:10]))


def test_config_yaml_gives_the_same_values_as_argv(tmp_path):
    """SGLang 0.5.23 reading servetune's --config YAML (plus the argv that must stay on the line)
    parses to the same fields as the plain argv."""
    version = "0.5.23"
    resolutions = [
        resolve_launch("qwen3-vl-8b-instruct", gpu="h200", sglang_version=version, sets=pins)
        for pins in (
            ["max_running_requests=512"],
            ["cuda_graph_bs_decode=1,2,4,8", "mm_enable_dp_encoder=false", "disable_radix_cache=true"],
        )
    ]
    argvs = []
    for i, res in enumerate(resolutions):
        text, rest = render_config_yaml(res.config, res.catalog, res.facts.model.path)
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        argvs += [res.argv(), ["--config", str(path), *rest]]
    results = parse_argvs(version, argvs)
    for i in range(0, len(results), 2):
        plain, config = results[i], results[i + 1]
        assert plain["ok"] and config["ok"], (plain["error"], config["error"])
        for field in resolutions[i // 2].requested():
            assert _equal(plain["values"][field], config["values"][field]), field


def test_sglang_rejects_the_removed_flag_servetune_never_emits():
    """In 0.5.23 `--cuda-graph-max-bs` is ambiguous (removed); servetune emits the -decode flag."""
    res = resolve_launch("qwen3-vl-8b-instruct", gpu="h200", sglang_version="0.5.23", sets=["max_running_requests=512"])
    assert "--cuda-graph-max-bs-decode" in res.argv() and "--cuda-graph-max-bs" not in res.argv()
    bad, good = parse_argvs("0.5.23", [["--model-path", "m", "--cuda-graph-max-bs", "256"], res.argv()])
    assert not bad["ok"] and "ambiguous option: --cuda-graph-max-bs" in bad["error"]
    assert good["ok"]
