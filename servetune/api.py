"""The one entry point the commands share: facts in, a validated, explained launch out.

    from servetune.api import resolve_launch
    res = resolve_launch("qwen3-vl-8b-instruct", gpu="h200")
    res.argv()      # ["--model-path", "Qwen/Qwen3-VL-8B-Instruct", "--mm-feature-transport", "cuda_ipc", ...]
    res.env()       # {"SGLANG_VLM_CACHE_SIZE_MB": "0", ...}

CONTRACT (stable for launch/bench/tune):
- `resolve_launch(model, *, gpu=None, hardware=None, workload=None, sglang_version=None,
  preset=None, sets=(), envs=(), nnodes=None, tp=None, rules_files=(), trial=None,
  use_rules=True) -> Resolution`
  * `model`: bundled name, HF id or local directory.  `gpu`: named profile ("h200", "h100-sxm:8").
    `hardware`: a saved profile file.  Neither given → NVML detection.
  * `workload`: a workload name or file (its facts feed rules), or a `Workload` object.
  * `sets` / `envs`: user pins as "FIELD=VALUE" / "NAME=VALUE" strings.
  * `trial`: {field or SGLANG_* env: value} applied at the tuner layer; a trial that breaks a
    `require` rule raises `RequireViolation` (a `ConflictError`) and must not be launched.
  * `use_rules=False` gives SGLang's own defaults (only preset/trial/pins apply).
- `Resolution.argv()` → flags after `python -m sglang.launch_server`, `--model-path` first.
- `Resolution.env()` → {name: str value} of SGLANG_* env decided (never secrets).
- `Resolution.requested()` → {field: value} for the server fields decided (for /server_info diffs).
- `Resolution.pinned` → frozenset of field/env names the user pinned (left out of tuning).
- `Resolution.facts`, `.config` (ResolvedConfig with Decision chains), `.catalog`.
"""
