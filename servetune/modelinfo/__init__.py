"""Model facts from a Hugging Face `config.json`: a local directory, an HF cache entry, or a
bundled config (`servetune/data/models/<name>/`). Nothing is ever downloaded.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from servetune.errors import SourceLocation, SpecError, UnknownNameError, did_you_mean
from servetune.schema.facts import ModelFacts

__all__ = ["bundled_models", "load_model_facts", "model_facts_from_config"]

log = logging.getLogger("servetune.modelinfo")

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
    from servetune.yamlio import decode_utf8, read_bytes

    try:
        data = json.loads(decode_utf8(read_bytes(path), str(path)))
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"config.json is not valid JSON: {exc.msg}",
            location=SourceLocation(str(path), exc.lineno, exc.colno),
            help=f"fix the JSON at {path}:{exc.lineno}:{exc.colno}, or point --model at another model directory",
        ) from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"config.json is not UTF-8 text (byte {exc.start}: {exc.reason})",
            location=SourceLocation(str(path)),
            help="a Hugging Face config.json is UTF-8 JSON; check the file is not truncated or binary",
        ) from None
    except OSError as exc:
        raise SpecError(
            f"cannot read {path}: {exc.strerror or exc}", help="check the path and its permissions"
        ) from None
    if not isinstance(data, dict):
        raise SpecError(
            f"config.json must hold a JSON object, but got a {type(data).__name__}", location=SourceLocation(str(path))
        )
    return data


def load_model_facts(model: str) -> ModelFacts:
    """Model facts for a bundled name, an HF id, a model directory or an HF cache directory.

    Raises:
        UnknownNameError: Neither a directory with config.json, nor a bundled or cached model.
    """
    path = Path(model).expanduser()
    if path.is_symlink() and not path.exists():  # a loop or a dangling link: a path, not a model name
        from servetune.yamlio import path_problem

        raise SpecError(f"cannot read model directory {model}: it is {path_problem(path)}", help="check the path")
    if path.exists() and not path.is_dir():
        raise SpecError(
            f"--model {model} is a file, not a model directory",
            help="point --model at the directory that holds config.json (or a bundled name or HF id)",
        )
    if path.is_dir():
        config_dir = path if (path / "config.json").is_file() else _snapshot_of_cache_dir(path)
        if config_dir is None:
            raise UnknownNameError(
                f"no config.json in model directory '{model}'",
                help="point --model at a directory that holds config.json",
            )
        config = config_dir / "config.json"
        return model_facts_from_config(_read_config(config), name=model, path=str(path), source=config)
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
            config = cached / "config.json"
            return model_facts_from_config(_read_config(config), name=model, path=model, source=config)
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


class _Config:
    """Typed reads from a config.json, each failure naming the file and the key."""

    def __init__(self, cfg: dict[str, Any], source: Path | None) -> None:
        self.cfg = cfg
        self.where = SourceLocation(str(source)) if source is not None else None

    def error(self, key: str, expected: str, value: Any) -> SpecError:
        return SpecError(
            f"config.json `{key}` must be {expected}, but got {value!r}",
            location=self.where,
            key_path=key,
            help="fix the value in config.json (Hugging Face writes it as a JSON number, list or object)",
        )

    def section(self, key: str) -> dict[str, Any] | None:
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, "a JSON object", value)
        return value

    def count(self, section: dict[str, Any], prefix: str, *keys: str, default: int = 0) -> int:
        """The first truthy of `keys` in `section` as a non-negative integer (`default` when none is set)."""
        for key in keys:
            value = section.get(key)
            if value is None or value == 0:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
                raise self.error(prefix + key, "a non-negative integer", value)
            return int(value)
        return default


def model_facts_from_config(cfg: dict[str, Any], *, name: str, path: str, source: Path | None = None) -> ModelFacts:
    """Derive `ModelFacts` from a parsed config.json (`source`: the file, named in errors and warnings).

    Raises:
        SpecError: A value of the wrong type (`hidden_size: "big"`, `text_config` not an object, ...).
    """
    c = _Config(cfg, source)
    archs = cfg.get("architectures")
    if archs is None or archs == []:
        log.warning(
            "%s has no `architectures`: the model's architecture is 'unknown', so rules that select on "
            'model.arch will not match (Hugging Face configs list it, e.g. ["Qwen3ForCausalLM"])',
            source or name,
        )
        archs = ["unknown"]
    elif not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise c.error("architectures", "a list of class names", archs)
    model_type = str(cfg.get("model_type", "unknown"))
    section = "text_config" if cfg.get("text_config") else "llm_config" if cfg.get("llm_config") else None
    text = (c.section(section) if section else None) or cfg
    prefix = f"{section}." if section else ""
    vision = c.section("vision_config")
    multimodal = vision is not None or "audio_config" in cfg or model_type in _MULTIMODAL_TYPES
    hidden = c.count(text, prefix, "hidden_size")
    layers = c.count(text, prefix, "num_hidden_layers")
    heads = c.count(text, prefix, "num_attention_heads", default=1)
    kv_heads = c.count(text, prefix, "num_key_value_heads", default=heads)
    head_dim = c.count(text, prefix, "head_dim", default=hidden // heads if heads else 0)
    vocab = c.count(text, prefix, "vocab_size") or c.count(cfg, "", "vocab_size")
    tied = bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    experts = c.count(text, prefix, "num_experts", "num_local_experts", "n_routed_experts")
    top_k = c.count(text, prefix, "num_experts_per_tok")
    inter = c.count(text, prefix, "intermediate_size")
    moe_inter = c.count(text, prefix, "moe_intermediate_size", default=inter)
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embed = vocab * hidden * (1 if tied else 2)
    if experts:
        mlp_total = experts * 3 * hidden * moe_inter
        mlp_active = max(top_k, 1) * 3 * hidden * moe_inter
        shared = c.count(text, prefix, "shared_expert_intermediate_size") * 3 * hidden
        mlp_total += shared
        mlp_active += shared
    else:
        mlp_total = mlp_active = 3 * hidden * inter
    vision_params = 0
    if vision is not None:
        vh = c.count(vision, "vision_config.", "hidden_size", "embed_dim")
        vdepth = c.count(vision, "vision_config.", "depth", "num_hidden_layers")
        vinter = c.count(vision, "vision_config.", "intermediate_size", default=4 * vh)
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
    ctx = c.count(text, prefix, "max_position_embeddings") or c.count(cfg, "", "max_position_embeddings")
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
