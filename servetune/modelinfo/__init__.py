"""Model facts from a Hugging Face `config.json`: a local directory, an HF cache entry, or a
bundled config (`servetune/data/models/<name>/`). Nothing is ever downloaded.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from servetune.errors import SpecError, UnknownNameError, did_you_mean
from servetune.schema.facts import ModelFacts

__all__ = ["bundled_models", "load_model_facts", "model_facts_from_config"]

# model_type values of multimodal architectures whose config has no vision_config key.
_MULTIMODAL_TYPES = {"llava", "mllama", "pixtral", "idefics3", "paligemma", "gemma3", "llama4"}


@functools.cache
def bundled_models() -> dict[str, str]:
    """Bundled model name → HF id."""
    text = resources.files("servetune.data").joinpath("models/index.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _hf_cache_dirs() -> list[Path]:
    roots = []
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]))
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    roots.append(hf_home / "hub")
    return roots


def _find_in_hf_cache(hf_id: str) -> Path | None:
    folder = "models--" + hf_id.replace("/", "--")
    for root in _hf_cache_dirs():
        snapshots = root / folder / "snapshots"
        if snapshots.is_dir():
            for snap in sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
                if (snap / "config.json").is_file():
                    return snap
    return None


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SpecError(f"config.json is not valid JSON: {exc.msg}", help=f"check {path}:{exc.lineno}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path} must hold a JSON object")
    return data


def load_model_facts(model: str) -> ModelFacts:
    """Model facts for a bundled name, an HF id, a model directory or an HF cache directory.

    Raises:
        UnknownNameError: Neither a directory with config.json, nor a bundled or cached model.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        config_dir = path if (path / "config.json").is_file() else _snapshot_of_cache_dir(path)
        if config_dir is None:
            raise UnknownNameError(
                f"no config.json in model directory '{model}'",
                help="point --model at a directory that holds config.json",
            )
        return model_facts_from_config(_read_config(config_dir / "config.json"), name=model, path=str(path))
    bundled = bundled_models()
    key = model.strip().lower()
    by_id = {hf.lower(): name for name, hf in bundled.items()}
    name = (
        key
        if key in bundled
        else by_id.get(key) or (key.rsplit("/", 1)[-1] if key.rsplit("/", 1)[-1] in bundled else None)
    )
    if name is not None:
        text = resources.files("servetune.data").joinpath(f"models/{name}/config.json").read_text(encoding="utf-8")
        return model_facts_from_config(json.loads(text), name=name, path=bundled[name])
    if "/" in model:
        cached = _find_in_hf_cache(model)
        if cached is not None:
            return model_facts_from_config(_read_config(cached / "config.json"), name=model, path=model)
    guess = did_you_mean(key, list(bundled) + list(by_id))
    raise UnknownNameError(
        f"unknown model '{model}': not a directory with config.json, a bundled model, or in the local HF cache",
        help=(f"did you mean '{guess}'? " if guess else "") + "bundled models: " + ", ".join(sorted(bundled)),
        notes=["servetune never downloads; pass a local model directory for other models"],
    )


def _snapshot_of_cache_dir(path: Path) -> Path | None:
    snapshots = path / "snapshots"
    if snapshots.is_dir():
        for snap in sorted(snapshots.iterdir()):
            if (snap / "config.json").is_file():
                return snap
    return None


def model_facts_from_config(cfg: dict[str, Any], *, name: str, path: str) -> ModelFacts:
    """Derive `ModelFacts` from a parsed config.json."""
    archs = cfg.get("architectures") or ["unknown"]
    model_type = str(cfg.get("model_type", "unknown"))
    text = cfg.get("text_config") or cfg.get("llm_config") or cfg
    vision = cfg.get("vision_config")
    multimodal = vision is not None or "audio_config" in cfg or model_type in _MULTIMODAL_TYPES
    hidden = int(text.get("hidden_size", 0))
    layers = int(text.get("num_hidden_layers", 0))
    heads = int(text.get("num_attention_heads", 1) or 1)
    kv_heads = int(text.get("num_key_value_heads", heads) or heads)
    head_dim = int(text.get("head_dim") or (hidden // heads if heads else 0))
    vocab = int(text.get("vocab_size", cfg.get("vocab_size", 0)) or 0)
    tied = bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    experts = int(text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts") or 0)
    top_k = int(text.get("num_experts_per_tok") or 0)
    inter = int(text.get("intermediate_size", 0))
    moe_inter = int(text.get("moe_intermediate_size") or inter)
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embed = vocab * hidden * (1 if tied else 2)
    if experts:
        mlp_total = experts * 3 * hidden * moe_inter
        mlp_active = max(top_k, 1) * 3 * hidden * moe_inter
        shared = int(text.get("shared_expert_intermediate_size") or 0) * 3 * hidden
        mlp_total += shared
        mlp_active += shared
    else:
        mlp_total = mlp_active = 3 * hidden * inter
    vision_params = 0
    if isinstance(vision, dict):
        vh = int(vision.get("hidden_size") or vision.get("embed_dim") or 0)
        vdepth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
        vinter = int(vision.get("intermediate_size") or 4 * vh)
        vision_params = vdepth * (4 * vh * vh + 2 * vh * vinter)
    total = embed + layers * (attn + mlp_total) + vision_params
    active = embed + layers * (attn + mlp_active) + vision_params
    if "kv_lora_rank" in text:
        attention = "mla"
    elif kv_heads == heads:
        attention = "mha"
    elif kv_heads == 1:
        attention = "mqa"
    else:
        attention = "gqa"
    quant_cfg = cfg.get("quantization_config") or text.get("quantization_config")
    quant = (
        str(quant_cfg.get("quant_method")) if isinstance(quant_cfg, dict) and quant_cfg.get("quant_method") else None
    )
    ctx = text.get("max_position_embeddings") or cfg.get("max_position_embeddings")
    return ModelFacts(
        name=name,
        path=path,
        arch=str(archs[0]),
        type=model_type,
        multimodal=multimodal,
        is_moe=experts > 0,
        params_b=round(total / 1e9, 2),
        active_params_b=round(active / 1e9, 2),
        context_length=int(ctx) if ctx else None,
        quant=quant,
        attention=attention,
        num_experts=experts,
    )
