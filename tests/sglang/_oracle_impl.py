"""The SGLang side of `tests/sglang/oracle.py`: runs inside the CPU-only harness.

Stdlib + SGLang only (and `servetune/catalog/_sync_impl.py`, which is stdlib only, for its
JSON rendering). Reads one JSON request from stdin and writes one JSON answer to the file
named by argv[1], so that anything SGLang prints on stdout cannot corrupt it.

Requests:
    {"op": "parse", "argvs": [[...], ...]}
    {"op": "qwen3vl", "cases": [{"sm90", "gpu_mem_mib", "model_type", "is_multimodal", "argv", "env"}, ...]}
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "servetune" / "catalog"))
from _sync_impl import to_json

ORACLE_MODEL_PATH = "oracle/qwen3-vl-stand-in"
ARCHITECTURES = {
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
}


def _record_fields(cls) -> list[str]:
    if hasattr(cls, "__struct_fields__"):
        return list(cls.__struct_fields__)
    import dataclasses

    return [f.name for f in dataclasses.fields(cls)]


def _unresolved_construction(server_args_cls):
    """Build ServerArgs without resolving, as 0.5.23's `prepare_server_args` does.

    Releases before the `resolve_once` split resolve inside `__post_init__` (which needs an
    accelerator); parsing alone is what the oracle answers for, so that step is skipped.
    """
    if hasattr(server_args_cls, "resolve_once"):
        return contextlib.nullcontext()
    return mock.patch.object(server_args_cls, "__post_init__", lambda self: None)


def _argparse_error(stderr: str, exc: BaseException) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if ": error: " in line]
    if errors:
        return errors[-1].split(": error: ", 1)[1]
    return f"{type(exc).__name__}: {exc}" if str(exc) else (lines[-1] if lines else type(exc).__name__)


def parse(argvs: list[list[str]]) -> list[dict]:
    """Run SGLang's own `prepare_server_args` on each argv (its argparse parser, `--config` merge
    and `from_cli_args`), without resolution."""
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    names = _record_fields(ServerArgs)
    results = []
    for argv in argvs:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured), _unresolved_construction(ServerArgs):
                server_args = prepare_server_args(list(argv))
        except (SystemExit, Exception) as exc:
            results.append({"ok": False, "error": _argparse_error(captured.getvalue(), exc), "values": {}})
            continue
        values = {name: to_json(getattr(server_args, name, None)) for name in names}
        results.append({"ok": True, "error": None, "values": values})
    return results


def _qwen3vl_case(case: dict) -> dict:
    import sglang.srt.arg_groups.model_overrides.qwen3_vl as qwen3_vl
    from sglang.srt.arg_groups import cuda_graph_hook, memory_hook
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view
    from sglang.srt.server_args import prepare_server_args

    model_type = case["model_type"]
    hf_config = SimpleNamespace(model_type=model_type, architectures=[ARCHITECTURES[model_type]])
    model_config = SimpleNamespace(is_multimodal=case["is_multimodal"], hf_config=hf_config)
    gpu_mem = case["gpu_mem_mib"]
    env_in = {k: str(v) for k, v in case.get("env", {}).items()}

    server_args = prepare_server_args(["--model-path", ORACLE_MODEL_PATH, *case.get("argv", [])])
    server_args._raw_input = {name: getattr(server_args, name) for name in _record_fields(type(server_args))}
    server_args._resolved_overrides = []
    facts = [
        mock.patch.dict(os.environ, env_in, clear=True),
        mock.patch.object(qwen3_vl, "is_sm90_supported", lambda: case["sm90"]),
        mock.patch.object(qwen3_vl, "get_device_memory_capacity", lambda device=None: gpu_mem),
        mock.patch.object(qwen3_vl, "model_config_of", lambda _sa: model_config),
        mock.patch.object(memory_hook, "get_device_memory_capacity", lambda device=None: gpu_mem),
        # Qwen3-VL and Qwen2.5-VL use MHA/GQA attention, never MLA.
        mock.patch.object(memory_hook, "use_mla_backend", lambda _sa: False),
    ]
    with contextlib.ExitStack() as stack:
        for patch in facts:
            stack.enter_context(patch)
        # What pipeline steps 3 and 4 would declare on a CUDA machine; then steps 6 and 7.
        declare_resolution(server_args, "oracle:device", device="cuda")
        if resolving_view(server_args).mem_fraction_static is None:
            # Keeps handle_gpu_memory_settings out of the ViT-size heuristic (it needs the real
            # ModelConfig); the decode graph sizes are computed before it and do not depend on it.
            declare_resolution(server_args, "oracle:skip-mem-fraction", mem_fraction_static=0.0)
        cuda_graph_hook.handle_cuda_graph_config(server_args)
        memory_hook.handle_gpu_memory_settings(server_args)
        view = resolving_view(server_args)
        decode = view.cuda_graph_config.decode
        declared = qwen3_vl._qwen3vl_hopper_serving_overrides(server_args, hf_config)
        env_set = {k: v for k, v in os.environ.items() if env_in.get(k) != v}
        return {
            "declared": to_json(declared),
            "env_set": env_set,
            "decode_max_bs": decode.max_bs,
            "decode_bs": to_json(decode.bs),
            "chunked_prefill_size": view.chunked_prefill_size,
        }


def qwen3vl(cases: list[dict]) -> list[dict]:
    """Call SGLang 0.5.23's Qwen3-VL provider and its memory hook on each case."""
    results = []
    for case in cases:
        try:
            results.append({"ok": True, "error": None, **_qwen3vl_case(case)})
        except Exception as exc:
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return results


def main() -> int:
    request = json.load(sys.stdin)
    handlers = {"parse": lambda r: parse(r["argvs"]), "qwen3vl": lambda r: qwen3vl(r["cases"])}
    answer = handlers[request["op"]](request)
    Path(sys.argv[1]).write_text(json.dumps(answer, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
