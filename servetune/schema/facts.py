"""Facts: what servetune knows about the hardware, model, workload, deployment and SGLang.

Facts are frozen and computed once, before resolution (detection, config.json parsing);
`resolve()` reads nothing else. Rule conditions refer to them by path (`gpu.arch`,
`model.type`, `workload.image_reuse`, `deployment.nnodes`, `sglang.version`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servetune.errors import SpecError
from servetune.limits import MAX_GPUS_PER_NODE, MAX_NODES

Arch = Literal["sm70", "sm75", "sm80", "sm86", "sm87", "sm89", "sm90", "sm100", "sm103", "sm110", "sm120", "sm121"]

_FROZEN = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)


class GpuFacts(BaseModel):
    """One node's GPUs (servetune resolves for homogeneous nodes)."""

    model_config = _FROZEN

    name: str
    """Device name as NVML reports it, e.g. `NVIDIA H200`."""
    arch: Arch
    """Compute capability as `sm<major><minor>`, e.g. H100/H200 → `sm90`."""
    memory_mib: int = Field(gt=0)
    """Total memory per GPU in MiB as NVML/nvidia-smi report it (SGLang's `gpu_mem`); the
    minimum over the node's GPUs."""
    count: int = Field(default=1, ge=1, le=MAX_GPUS_PER_NODE)
    """GPUs on the node (at most `servetune.limits.MAX_GPUS_PER_NODE`)."""
    nvlink: bool = False
    """True when GPUs have at least one active NVLink."""
    driver_version: str | None = None
    """NVIDIA driver version, e.g. `580.159.04` (None for a named profile)."""
    cuda_driver_version: str | None = None
    """Highest CUDA version the driver supports, e.g. `13.0` (None for a named profile)."""

    @property
    def memory_gib(self) -> float:
        """Memory per GPU in GiB (`memory_mib / 1024`)."""
        return self.memory_mib / 1024

    @property
    def sm(self) -> int:
        """Compute capability as an integer, e.g. 90."""
        return int(self.arch[2:])


class HardwareProfile(BaseModel):
    """A saved or named hardware description (`servetune hardware --save FILE`)."""

    model_config = _FROZEN

    gpu: GpuFacts
    """The node's GPUs."""
    source: str = "named"
    """Where the facts came from: `nvml`, `named:<profile>` or a file path."""
    uuids: list[str] = Field(default_factory=list)
    """GPU UUIDs, when detected."""


class ModelFacts(BaseModel):
    """What servetune reads from a model's `config.json`."""

    model_config = _FROZEN

    name: str
    """Bundled name, HF id or directory the facts came from."""
    path: str
    """What SGLang gets as `--model-path` (HF id for bundled configs, the directory otherwise)."""
    arch: str
    """`architectures[0]`, e.g. `Qwen3VLForConditionalGeneration`."""
    type: str
    """`model_type`, e.g. `qwen3_vl`."""
    multimodal: bool
    """True for vision-language (or other multimodal) models."""
    is_moe: bool
    """True for mixture-of-experts models."""
    params_b: float
    """Approximate total parameter count in billions (estimated from the config shapes)."""
    active_params_b: float
    """Approximate parameters active per token in billions (equals `params_b` for dense models)."""
    context_length: int | None = None
    """`max_position_embeddings` of the language model."""
    quant: str | None = None
    """`quantization_config.quant_method`, or None for unquantized checkpoints."""
    attention: Literal["mha", "gqa", "mqa", "mla"] = "gqa"
    """Attention layout from the head counts (`mla` when `kv_lora_rank` is present)."""
    num_experts: int = 0
    """Routed experts per MoE layer (0 for dense models)."""


class WorkloadFacts(BaseModel):
    """The traffic the launch is resolved for (from a workload file)."""

    model_config = _FROZEN

    name: str = "unspecified"
    """Workload name, or `unspecified` when none was given."""
    kind: Literal["text", "multimodal", "unspecified"] = "unspecified"
    """`multimodal` workloads send images."""
    image_reuse: Literal["unique", "repeated", "none", "unspecified"] = "unspecified"
    """`unique`: every image is new (caches never hit); `repeated`: images recur (caches can hit)."""
    images_per_request: int = 0
    """Images per request (0 for text)."""
    input_tokens: int | None = None
    """Typical text input length."""
    output_tokens: int | None = None
    """Typical output length."""
    max_concurrency: int | None = None
    """Requests in flight at most."""


class DeploymentFacts(BaseModel):
    """How the server is laid out."""

    model_config = _FROZEN

    nnodes: int = Field(default=1, ge=1, le=MAX_NODES)
    """Nodes the server spans (`--nnodes`; at most `servetune.limits.MAX_NODES`)."""
    tp: int = Field(default=1, ge=1)
    """Tensor-parallel size (`--tp-size`)."""

    @classmethod
    def from_pins(cls, pins: Mapping[str, Any]) -> DeploymentFacts:
        """The layout from the `nnodes` and `tp_size` pins (1 when not pinned).

        Raises:
            SpecError: a pin that is not a positive integer, naming the pin and how to write it.
        """
        values = {}
        for field, key, flag in (("nnodes", "nnodes", "--nnodes"), ("tp", "tp_size", "--tp")):
            raw = pins.get(key, 1)
            try:
                value = int(str(raw).strip()) if not isinstance(raw, bool) else None
            except ValueError:
                value = None
            if value is None or value < 1:
                raise SpecError(
                    f"bad value for {key}={raw} (pin): expected a positive integer",
                    help=f"write e.g. --set {key}=1 (or {flag} 1)",
                )
            if field == "nnodes" and value > MAX_NODES:
                raise SpecError(
                    f"bad value for {key}={raw} (pin): a server spans at most {MAX_NODES} nodes",
                    help=f"write e.g. --set {key}=2 (or {flag} 2)",
                )
            values[field] = value
        return cls(**values)


class SglangFacts(BaseModel):
    """The target SGLang release and the defaults it computes from the hardware."""

    model_config = _FROZEN

    version: str
    """Target SGLang version, e.g. `0.5.23`."""
    default_cuda_graph_max_bs_decode: int | None = None
    """The decode CUDA-graph max batch size SGLang picks from GPU memory and TP when no flag sets it."""
    default_chunked_prefill_size: int | None = None
    """The chunked-prefill size SGLang picks from GPU memory when no flag sets it."""


class Facts(BaseModel):
    """Everything `resolve()` may look at."""

    model_config = _FROZEN

    gpu: GpuFacts
    """GPU facts."""
    model: ModelFacts
    """Model facts."""
    workload: WorkloadFacts = WorkloadFacts()
    """Workload facts."""
    deployment: DeploymentFacts = DeploymentFacts()
    """Deployment facts."""
    sglang: SglangFacts
    """Target SGLang facts."""


def sglang_memory_defaults(memory_mib: int | None, tp: int) -> tuple[int, int]:
    """SGLang's default `(chunked_prefill_size, decode cuda-graph max_bs)` for a GPU size and TP.

    The table of `memory_hook.handle_gpu_memory_settings` (stable from 0.5.10 to 0.5.23).
    """
    if memory_mib is None:
        return 4096, 160
    if memory_mib < 20 * 1024:
        return 2048, 8
    if memory_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if memory_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if memory_mib < 90 * 1024:
        return 8192, 256 if tp < 4 else 512
    if memory_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


# The vocabulary of rule conditions: path → value type.
FACT_PATHS: dict[str, str] = {
    "gpu.name": "str",
    "gpu.arch": "str",
    "gpu.sm": "int",
    "gpu.memory_mib": "int",
    "gpu.memory_gib": "float",
    "gpu.count": "int",
    "gpu.nvlink": "bool",
    "model.name": "str",
    "model.arch": "str",
    "model.type": "str",
    "model.multimodal": "bool",
    "model.is_moe": "bool",
    "model.params_b": "float",
    "model.active_params_b": "float",
    "model.context_length": "int",
    "model.quant": "str",
    "model.attention": "str",
    "model.num_experts": "int",
    "workload.name": "str",
    "workload.kind": "str",
    "workload.image_reuse": "str",
    "workload.images_per_request": "int",
    "workload.input_tokens": "int",
    "workload.output_tokens": "int",
    "workload.max_concurrency": "int",
    "deployment.nnodes": "int",
    "deployment.tp": "int",
    "sglang.version": "version",
    "sglang.default_cuda_graph_max_bs_decode": "int",
    "sglang.default_chunked_prefill_size": "int",
}


def fact_value(facts: Facts, path: str) -> object:
    """The value of a fact path (see `FACT_PATHS`)."""
    group, _, attr = path.partition(".")
    return getattr(getattr(facts, group), attr)
