"""SGLang 0.5.23's own Qwen3-VL override and decode-graph sizing, called through the oracle,
reproduce the tables of sglang-reference §2.1 and §3 (so the oracle measures what it claims)."""

from __future__ import annotations

import pytest

from tests.sglang.oracle import qwen3vl_oracle

H200, H100, A100_40G, B200 = 143771, 81559, 40960, 183359
LARGE_HOPPER = {
    "sm90": True,
    "gpu_mem_mib": H200,
    "model_type": "qwen3_vl",
    "is_multimodal": True,
    "argv": [],
    "env": {},
}
PROFILE = {
    "mm_preprocess_cache_size_mb": 0,
    "mm_feature_transport": "cuda_ipc",
    "radix_eviction_policy": "priority",
    "prefill_decode_interval": 22,
    "decode_attention_backend": "flashinfer",
}


def case(**changes) -> dict:
    return {**LARGE_HOPPER, **changes}


def without(mapping: dict, *keys: str) -> dict:
    return {k: v for k, v in mapping.items() if k not in keys}


# (case, declared, env_set, decode max_bs) — sglang-reference §2.1 and §3.
TABLE = [
    pytest.param(case(), PROFILE, {"SGLANG_VLM_CACHE_SIZE_MB": "0"}, 256, id="h200-no-args"),
    pytest.param(
        case(argv=["--max-running-requests", "512"]),
        PROFILE,
        {"SGLANG_VLM_CACHE_SIZE_MB": "0", "SGLANG_MM_FEATURE_CACHE_MB": "3072"},
        512,
        id="h200-mrr512",
    ),
    pytest.param(
        case(argv=["--radix-eviction-policy", "lru", "--max-running-requests", "400"]),
        without(PROFILE, "radix_eviction_policy"),
        {"SGLANG_VLM_CACHE_SIZE_MB": "0", "SGLANG_MM_FEATURE_CACHE_MB": "3072"},
        400,
        id="explicit-lru-mrr400",
    ),
    pytest.param(
        case(argv=["--mm-preprocess-cache-size-mb", "256"]),
        without(PROFILE, "mm_feature_transport", "mm_preprocess_cache_size_mb"),
        {"SGLANG_VLM_CACHE_SIZE_MB": "0"},
        256,
        id="preprocess-cache-blocks-ipc",
    ),
    pytest.param(
        case(env={"SGLANG_VLM_CACHE_SIZE_MB": "100"}),
        without(PROFILE, "mm_feature_transport"),
        {},
        256,
        id="user-vlm-cache-kept",
    ),
    pytest.param(
        case(argv=["--nnodes", "2"]),
        without(PROFILE, "mm_feature_transport"),
        {"SGLANG_VLM_CACHE_SIZE_MB": "0"},
        256,
        id="two-nodes-no-ipc",
    ),
    pytest.param(case(sm90=False), {}, {}, 256, id="not-sm90"),
    pytest.param(case(gpu_mem_mib=A100_40G), {}, {}, 32, id="under-60gib"),
    pytest.param(case(model_type="qwen2_5_vl"), {}, {}, 256, id="qwen2.5-vl"),
    pytest.param(case(is_multimodal=False), {}, {}, 256, id="language-model-only"),
    pytest.param(
        case(model_type="qwen3_vl_moe", argv=["--max-running-requests", "128"]),
        PROFILE,
        {"SGLANG_VLM_CACHE_SIZE_MB": "0"},
        128,
        id="moe-mrr128",
    ),
    pytest.param(
        case(argv=["--max-running-requests", "512", "--cuda-graph-max-bs-decode", "128"]),
        PROFILE,
        {"SGLANG_VLM_CACHE_SIZE_MB": "0", "SGLANG_MM_FEATURE_CACHE_MB": "3072"},
        128,
        id="explicit-decode-max-bs-wins",
    ),
    pytest.param(
        case(gpu_mem_mib=H100, argv=["--max-running-requests", "400"]),
        PROFILE,
        {"SGLANG_VLM_CACHE_SIZE_MB": "0", "SGLANG_MM_FEATURE_CACHE_MB": "3072"},
        400,
        id="h100-mrr400",
    ),
    pytest.param(
        case(sm90=False, gpu_mem_mib=B200, argv=["--max-running-requests", "512"]), {}, {}, 512, id="b200-mrr512"
    ),
]


@pytest.fixture(scope="module")
def answers() -> dict:
    """All table rows in one SGLang process."""
    cases = [p.values[0] for p in TABLE]
    return dict(zip([p.id for p in TABLE], qwen3vl_oracle(cases)))


@pytest.mark.parametrize(("given", "declared", "env_set", "decode_max_bs"), TABLE)
def test_sglang_reproduces_the_reference_table(request, answers, given, declared, env_set, decode_max_bs):
    """SGLang's provider declares, sets env and sizes the decode graph as the reference says."""
    answer = answers[request.node.callspec.id]
    assert answer["declared"] == declared
    assert answer["env_set"] == env_set
    assert answer["decode_max_bs"] == decode_max_bs


def test_the_decode_batch_list_is_generated_from_the_expanded_max_bs(answers):
    """H200 at tp<4 captures 36 sizes up to 256; with 512 running requests, 52 sizes up to 512."""
    assert len(answers["h200-no-args"]["decode_bs"]) == 36
    assert answers["h200-mrr512"]["decode_bs"][-1] == 512
    assert len(answers["h200-mrr512"]["decode_bs"]) == 52


def test_chunked_prefill_follows_gpu_memory(answers):
    """chunked_prefill_size is 8192 on H100/H200, 4096 under 60 GiB, 16384 on B200."""
    assert answers["h200-no-args"]["chunked_prefill_size"] == 8192
    assert answers["under-60gib"]["chunked_prefill_size"] == 4096
    assert answers["b200-mrr512"]["chunked_prefill_size"] == 16384
