"""servetune's Qwen3-VL large-Hopper rules against SGLang 0.5.23's own override functions.

Over a grid of GPU (SM and memory), nnodes, model types, values the user set and env vars:
1. the values servetune resolves equal what SGLang's provider and memory hook decide;
2. feeding servetune's argv and env back to SGLang leaves nothing for its override to change,
   and the decode CUDA graph ends at the same size.
SGLang's functions run on CPU with only the hardware facts patched (tests/sglang/oracle.py).
"""

from __future__ import annotations

import itertools

import pytest

from servetune.api import resolve_launch
from servetune.schema.facts import GpuFacts, HardwareProfile

from .oracle import qwen3vl_oracle

pytestmark = pytest.mark.sglang

VERSION = "0.5.23"
PROFILE_FIELDS = (
    "mm_preprocess_cache_size_mb",
    "mm_feature_transport",
    "radix_eviction_policy",
    "prefill_decode_interval",
    "decode_attention_backend",
)
PROFILE_ENV = ("SGLANG_VLM_CACHE_SIZE_MB", "SGLANG_MM_FEATURE_CACHE_MB")
HARDWARE = {  # name: (arch, memory MiB)
    "h200": ("sm90", 143771),
    "h100-80g": ("sm90", 81559),
    "h20-96g": ("sm90", 97871),
    "hopper-48g": ("sm90", 49152),
    "b200": ("sm100", 183359),
    "a100-80g": ("sm80", 81920),
}
MODELS = {
    "qwen3_vl": "qwen3-vl-8b-instruct",
    "qwen3_vl_moe": "qwen3-vl-30b-a3b-instruct",
    "qwen2_5_vl": "qwen2.5-vl-7b-instruct",
}
USER_ARGS = [
    [],
    ["--max-running-requests", "512"],
    ["--max-running-requests", "400"],
    ["--max-running-requests", "300"],
    ["--max-running-requests", "256"],
    ["--max-running-requests", "128"],
    ["--max-running-requests", "600"],
    ["--radix-eviction-policy", "lru", "--max-running-requests", "400"],
    ["--radix-eviction-policy", "lfu"],
    ["--mm-preprocess-cache-size-mb", "256"],
    ["--mm-preprocess-cache-size-mb", "0", "--max-running-requests", "450"],
    ["--mm-feature-transport", "cpu", "--max-running-requests", "512"],
    ["--mm-feature-transport", "cuda_ipc", "--max-running-requests", "400", "--mm-preprocess-cache-size-mb", "64"],
    ["--attention-backend", "triton"],
    ["--decode-attention-backend", "fa3"],
    ["--prefill-attention-backend", "fa3"],
    ["--cuda-graph-max-bs-decode", "128", "--max-running-requests", "512"],
    ["--cuda-graph-bs-decode", "1", "2", "4", "8", "--max-running-requests", "512"],
    ["--prefill-decode-interval", "5"],
]
ENVS = [
    {},
    {"SGLANG_VLM_CACHE_SIZE_MB": "100"},
    {"SGLANG_VLM_CACHE_SIZE_MB": "0"},
    {"SGLANG_MM_FEATURE_CACHE_MB": "2048"},
]


def _grid() -> list[dict]:
    cases = []
    # every hardware x model x nnodes, no user values
    for hw, model, nnodes in itertools.product(HARDWARE, MODELS, (1, 2)):
        cases.append({"hw": hw, "model": model, "nnodes": nnodes, "args": [], "env": {}})
    # every user value x env on the profile's home (H200, Qwen3-VL, one node)
    for args, env in itertools.product(USER_ARGS, ENVS):
        cases.append({"hw": "h200", "model": "qwen3_vl", "nnodes": 1, "args": args, "env": env})
    # every user value on other memory sizes, the MoE variant and two nodes
    for args, (hw, model, nnodes) in itertools.product(
        USER_ARGS,
        [
            ("h100-80g", "qwen3_vl_moe", 1),
            ("h20-96g", "qwen3_vl", 2),
            ("hopper-48g", "qwen3_vl", 1),
            ("b200", "qwen3_vl", 1),
        ],
    ):
        if nnodes > 1 and "cuda_ipc" in args:
            continue  # servetune refuses it (require rule cuda-ipc-transport-single-node); SGLang fails at start
        cases.append({"hw": hw, "model": model, "nnodes": nnodes, "args": args, "env": {}})
    return cases


def _pins(args: list[str]) -> list[str]:
    """SGLang argv → servetune --set pins."""
    pins, i = [], 0
    while i < len(args):
        name = args[i][2:].replace("-", "_")
        values = []
        i += 1
        while i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        pins.append(f"{name}={','.join(values)}")
    return pins


def _servetune(case: dict):
    arch, mem = HARDWARE[case["hw"]]
    hw = HardwareProfile(gpu=GpuFacts(name=case["hw"], arch=arch, memory_mib=mem, count=1))
    return resolve_launch(
        MODELS[case["model"]],
        hardware=hw,
        sglang_version=VERSION,
        sets=_pins(case["args"]),
        envs=[f"{k}={v}" for k, v in case["env"].items()],
        nnodes=case["nnodes"],
    )


def _oracle_case(case: dict, argv: list[str], env: dict) -> dict:
    arch, mem = HARDWARE[case["hw"]]
    nnodes = [] if "--nnodes" in argv else ["--nnodes", str(case["nnodes"])]
    return {
        "sm90": arch == "sm90",
        "gpu_mem_mib": mem,
        "model_type": case["model"],
        "is_multimodal": True,
        "argv": argv + nnodes,
        "env": env,
    }


def _user_value(args: list[str], field: str):
    flag = "--" + field.replace("_", "-")
    return args[args.index(flag) + 1] if flag in args else None


@pytest.fixture(scope="module")
def grid():
    cases = _grid()
    resolutions = [_servetune(c) for c in cases]
    first = qwen3vl_oracle([_oracle_case(c, c["args"], c["env"]) for c in cases])
    fed_back = qwen3vl_oracle([_oracle_case(c, r.argv()[2:], r.env()) for c, r in zip(cases, resolutions)])
    return list(zip(cases, resolutions, first, fed_back))


def test_grid_is_large_and_covers_both_outcomes(grid):
    """The grid has cases where the profile applies and where it does not."""
    assert len(grid) >= 150
    applied = sum(1 for _, _, sgl, _ in grid if sgl["declared"] or sgl["env_set"])
    assert 0 < applied < len(grid)


def test_servetune_decides_what_sglang_decides(grid, catalogs):
    """Effective profile fields and env vars equal SGLang's own decisions, case by case."""
    catalog = next(c for c in catalogs if c.sglang_version == VERSION)
    mismatches = []
    for case, res, sgl, _ in grid:
        for field in PROFILE_FIELDS:
            default = catalog.fields[field].default
            user = _user_value(case["args"], field)
            theirs = sgl["declared"].get(field, user if user is not None else default)
            got = res.config.get(field)
            ours = got.value if got is not None else default
            if str(theirs) != str(ours):
                mismatches.append((case, field, theirs, ours))
        final_env = {**case["env"], **sgl["env_set"]}
        for var in PROFILE_ENV:
            if final_env.get(var) != res.env().get(var):
                mismatches.append((case, var, final_env.get(var), res.env().get(var)))
    assert not mismatches, "\n".join(map(str, mismatches[:20]))


def test_sglang_has_nothing_left_to_change_on_servetunes_launch(grid):
    """servetune's argv and env, fed back to SGLang: no declaration, no env write, same decode graph."""
    problems = []
    for case, _res, first, again in grid:
        if again["declared"] or again["env_set"]:
            problems.append((case, "declared", again["declared"], again["env_set"]))
        if again["decode_max_bs"] != first["decode_max_bs"]:
            problems.append((case, "decode_max_bs", first["decode_max_bs"], again["decode_max_bs"]))
    assert not problems, "\n".join(map(str, problems[:20]))
