"""Model facts from config.json: bundled names, HF ids, local directories and HF cache entries."""

from __future__ import annotations

import json

import pytest

from servetune.errors import SpecError, UnknownNameError
from servetune.modelinfo import bundled_models, load_model_facts

EXPECTED = {  # name: (arch, type, multimodal, moe, params_b range, context)
    "qwen3-vl-8b-instruct": ("Qwen3VLForConditionalGeneration", "qwen3_vl", True, False, (8, 9.5), 262144),
    "qwen3-vl-30b-a3b-instruct": ("Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe", True, True, (29, 33), 262144),
    "qwen2.5-vl-3b-instruct": ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", True, False, (3, 4.2), 128000),
    "qwen2.5-vl-7b-instruct": ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", True, False, (7, 9), 128000),
    "llama-3.1-8b-instruct": ("LlamaForCausalLM", "llama", False, False, (7.5, 8.5), 131072),
    "qwen3-8b": ("Qwen3ForCausalLM", "qwen3", False, False, (7.5, 8.5), 40960),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_models_give_their_facts(name):
    """Each bundled config gives the architecture, type, modality, MoE, size and context length."""
    arch, mtype, mm, moe, (lo, hi), ctx = EXPECTED[name]
    f = load_model_facts(name)
    assert (f.arch, f.type, f.multimodal, f.is_moe, f.context_length) == (arch, mtype, mm, moe, ctx)
    assert lo <= f.params_b <= hi
    assert f.quant is None and f.attention == "gqa"


def test_hf_ids_and_names_are_case_insensitive():
    """`Qwen/Qwen3-VL-8B-Instruct` and `QWEN3-VL-8B-INSTRUCT` both find the bundled config; the launch
    uses the HF id."""
    assert set(EXPECTED) <= set(bundled_models())
    a = load_model_facts("Qwen/Qwen3-VL-8B-Instruct")
    b = load_model_facts("QWEN3-VL-8B-INSTRUCT")
    assert a.path == b.path == "Qwen/Qwen3-VL-8B-Instruct"


def test_moe_active_parameters_are_smaller_than_total():
    """The 30B-A3B MoE activates about 3B parameters per token."""
    f = load_model_facts("qwen3-vl-30b-a3b-instruct")
    assert f.num_experts == 128 and 2.5 <= f.active_params_b <= 4.5


def test_a_local_model_directory_is_read_and_passed_as_the_model_path(tmp_path):
    """A directory with config.json: its facts, and the directory as --model-path; quantization is read."""
    cfg = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "quantization_config": {"quant_method": "fp8"},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    f = load_model_facts(str(tmp_path))
    assert (f.arch, f.is_moe, f.multimodal, f.quant, f.path) == (
        "MixtralForCausalLM",
        True,
        False,
        "fp8",
        str(tmp_path),
    )
    assert 40 <= f.params_b <= 50 and 11 <= f.active_params_b <= 15


def test_an_hf_cache_entry_is_found_without_downloading(tmp_path, monkeypatch):
    """An HF id that is in the local HF cache (hub layout) resolves offline."""
    snap = tmp_path / "models--acme--tiny-vlm" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlavaForConditionalGeneration"],
                "model_type": "llava",
                "text_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
                "vision_config": {"hidden_size": 32, "num_hidden_layers": 2},
            }
        )
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    f = load_model_facts("acme/tiny-vlm")
    assert (f.arch, f.multimodal, f.path) == ("LlavaForConditionalGeneration", True, "acme/tiny-vlm")
    assert load_model_facts(str(tmp_path / "models--acme--tiny-vlm")).type == "llava"


def test_unknown_models_are_an_error_never_a_download(tmp_path, monkeypatch):
    """An HF id not bundled and not cached is an error that says servetune never downloads."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UnknownNameError) as info:
        load_model_facts("acme/not-here")
    assert "never downloads" in info.value.render()


def test_a_broken_config_json_is_a_spec_error(tmp_path):
    """Invalid JSON names the file and line."""
    (tmp_path / "config.json").write_text('{"architectures": [\n')
    with pytest.raises(SpecError) as info:
        load_model_facts(str(tmp_path))
    assert "config.json is not valid JSON" in info.value.message and "config.json:2" in info.value.help
