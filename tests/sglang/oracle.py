"""SGLang as a test oracle: its real parser and its real Qwen3-VL override, on CPU.

Each function runs ONE subprocess in the CPU-only harness (`scripts/setup_sglang_cpu.sh`,
`servetune.catalog._harness`) for a whole batch, because importing SGLang takes seconds.

    parse_argvs(version: str, argvs: list[list[str]]) -> list[dict]
        For each argv, SGLang `version`'s own `prepare_server_args(argv)` (argparse, `--config`
        YAML merge, `from_cli_args`), unresolved, as 0.5.23 returns it (older releases resolve
        in `__post_init__`, which needs a GPU; that step is skipped). Each result is
        `{"ok": bool, "error": str | None, "values": {field: value}}`; `values` has every
        ServerArgs field (private ones too, e.g. `_radix_eviction_policy_explicitly_set`),
        rendered as JSON (enums as values, sets as sorted lists). `error` is argparse's message
        (e.g. "ambiguous option: --cuda-graph-max-bs could match ...") or the exception.
        An argv needs `--model-path` like any SGLang command line.

    qwen3vl_oracle(cases: list[dict]) -> list[dict]          (SGLang 0.5.23)
        Each case: `{"sm90": bool, "gpu_mem_mib": int, "model_type": "qwen3_vl" | "qwen3_vl_moe"
        | "qwen2_5_vl", "is_multimodal": bool, "argv": [...], "env": {...}}` (argv without
        `--model-path`). SGLang builds ServerArgs from argv, then runs, in pipeline order:
        `handle_cuda_graph_config`, `handle_gpu_memory_settings` (the default decode max_bs table,
        the cap to `max_running_requests`, `expand_multimodal_decode_graph_to_running_limit`,
        the bs list) and `_qwen3vl_hopper_serving_overrides`, under
        `mock.patch.dict(os.environ, env, clear=True)`. Each result is
        `{"declared": {field: value}, "env_set": {var: str}, "decode_max_bs": int | None,
        "decode_bs": [int], "chunked_prefill_size": int | None}`; `env_set` holds the variables
        the provider wrote (new or changed).
        Patched, and only these: the hardware facts `is_sm90_supported`,
        `get_device_memory_capacity` (MiB) and `model_config_of` (a stand-in with
        `.is_multimodal` and `.hf_config.model_type`); `use_mla_backend` → False (a model fact
        of these families); `device` declared `cuda` (what SGLang detects on a GPU); and
        `mem_fraction_static` declared when unset, so the memory hook skips its ViT-size
        heuristic, which needs the real model config and does not feed the decode graph.
        Raises `OracleError` if SGLang fails on any case.

Both raise `OracleError` when the harness is missing or the subprocess fails.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from servetune.catalog._harness import harness_command, harness_versions

__all__ = ["OracleError", "QWEN3VL_VERSION", "harness_versions", "parse_argvs", "qwen3vl_oracle"]

QWEN3VL_VERSION = "0.5.23"
_IMPL = Path(__file__).with_name("_oracle_impl.py")


class OracleError(RuntimeError):
    """The SGLang oracle could not answer."""


def _ask(version: str, request: dict, timeout: float) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="servetune-oracle-") as tmp:
        answer = Path(tmp) / "answer.json"
        command = [*harness_command(version), str(_IMPL), str(answer)]
        done = subprocess.run(
            command, input=json.dumps(request), capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0 or not answer.exists():
            tail = "\n".join(done.stderr.strip().splitlines()[-20:])
            raise OracleError(f"SGLang {version} oracle failed (exit {done.returncode}):\n{tail}")
        return json.loads(answer.read_text(encoding="utf-8"))


def parse_argvs(version: str, argvs: list[list[str]], *, timeout: float = 300) -> list[dict]:
    """SGLang `version`'s parser on every argv; see the module docstring."""
    return _ask(version, {"op": "parse", "argvs": [list(a) for a in argvs]}, timeout)


def qwen3vl_oracle(cases: list[dict], *, timeout: float = 300) -> list[dict]:
    """SGLang 0.5.23's Qwen3-VL provider and decode-graph sizing on every case; see the module docstring."""
    results = _ask(QWEN3VL_VERSION, {"op": "qwen3vl", "cases": list(cases)}, timeout)
    failed = [(i, r["error"]) for i, r in enumerate(results) if not r.pop("ok")]
    if failed:
        raise OracleError("SGLang failed on cases: " + "; ".join(f"#{i}: {err}" for i, err in failed))
    for result in results:
        result.pop("error")
    return results
