"""The `sglang` client: SGLang's own `bench_serving`, run as a subprocess, its JSONL parsed.

`python -m sglang.benchmark.serving` (0.5.18 and newer keep the implementation there; the
older `sglang.bench_serving` module is used when that file is absent). It needs SGLang's
client dependencies (transformers, aiohttp, numpy) and, for image workloads, the model's
processor files. It cannot report partial results, so `should_stop` is not honoured and
`on_progress` is called once, at the end.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from servetune.bench._sglang_jsonl import parse_sglang_jsonl
from servetune.bench.metrics import Snapshot
from servetune.bench.schema import Metrics
from servetune.errors import BenchError
from servetune.schema.workload import Workload

OUTPUT_FILE = "sglang_bench.jsonl"
LOG_FILE = "sglang_bench.log"


def sglang_client_module() -> str | None:
    """The module that runs SGLang's client here, or None when SGLang is not importable.

    Found without importing SGLang (which would pull in torch).
    """
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location)
        if (root / "benchmark" / "serving.py").is_file():
            return "sglang.benchmark.serving"
        if (root / "bench_serving.py").is_file():
            return "sglang.bench_serving"
    return None


def inexpressible_reason(workload: Workload) -> str | None:
    """Why SGLang's client cannot drive `workload`, or None when it can."""
    if workload.trace is not None:
        return "SGLang's client does not replay servetune traces; the builtin client does"
    if workload.images is not None and workload.images.reuse == "pool":
        return "SGLang's image dataset makes a new image for every request; it has no pool of repeated images"
    return None


def sglang_argv(
    module: str,
    base_url: str,
    workload: Workload,
    *,
    requests: int,
    output_file: Path,
    model: str | None = None,
    seed: int | None = None,
) -> list[str]:
    """The `bench_serving` command line for `workload` (python executable first)."""
    argv = [
        sys.executable,
        "-m",
        module,
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        base_url,
        "--num-prompts",
        str(requests),
        "--random-input-len",
        str(workload.input_tokens),
        "--random-output-len",
        str(workload.output_tokens),
        "--random-range-ratio",
        str(workload.range_ratio),
        "--request-rate",
        "inf" if workload.request_rate is None else str(workload.request_rate),
        "--warmup-requests",
        str(workload.warmup_requests),
        "--seed",
        str(workload.seed if seed is None else seed),
        "--output-file",
        str(output_file),
        "--output-details",
        "--disable-tqdm",
    ]
    if workload.max_concurrency is not None:
        argv += ["--max-concurrency", str(workload.max_concurrency)]
    if workload.images is not None:
        argv += [
            "--dataset-name",
            "image",
            "--image-count",
            str(workload.images.per_request),
            "--image-resolution",
            workload.images.resolution,
            "--image-format",
            workload.images.format,
            "--image-content",
            "random",
        ]
    else:
        argv += ["--dataset-name", "random"]
    if model:
        argv += ["--model", model]
    return argv


def run_sglang(
    url: str,
    workload: Workload,
    *,
    requests: int,
    run_dir: Path,
    model: str | None = None,
    on_progress=None,
    module: str | None = None,
    api_key: str | None = None,
) -> Metrics:
    """Run SGLang's client against `url` and parse its result line.

    For image workloads `--seed` is drawn fresh for every run: SGLang derives its images from
    the seed, so a fixed seed would send the same images in every run. `api_key` reaches SGLang's
    client as `OPENAI_API_KEY` (its only way in; never on the command line).

    Raises:
        BenchError: SGLang's client is not importable, cannot express the workload, exits
            non-zero (the log tail is attached), or writes no result.
    """
    from servetune.bench._probe import base_url_of

    module = module or sglang_client_module()
    if module is None:
        raise BenchError(
            "SGLang's benchmark client is not importable here",
            help="use `--client builtin`, or install SGLang in this Python environment",
        )
    reason = inexpressible_reason(workload)
    if reason:
        raise BenchError(
            f"SGLang's client cannot run workload '{workload.name}': {reason}", help="use `--client builtin`"
        )
    base = base_url_of(url)
    check_reachable(base, api_key)
    run_dir.mkdir(parents=True, exist_ok=True)
    output = run_dir / OUTPUT_FILE
    output.unlink(missing_ok=True)
    seed = int.from_bytes(os.urandom(4), "big") if workload.images is not None else None
    argv = sglang_argv(module, base, workload, requests=requests, output_file=output, model=model, seed=seed)
    log_path = run_dir / LOG_FILE
    (run_dir / "sglang_bench.argv").write_text(shlex.join(argv) + "\n", encoding="utf-8")
    timeout = workload.request_timeout_s * max(1, requests // max(workload.max_concurrency or requests, 1) + 2) + 600
    started = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        try:
            env = {**os.environ, "OPENAI_API_KEY": api_key} if api_key else None
            completed = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False, env=env
            )
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"SGLang's client did not finish within {timeout:.0f} s", notes=[f"log: {log_path}"]
            ) from None
    wall = time.perf_counter() - started
    if completed.returncode != 0 or not output.is_file():
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise BenchError(
            f"SGLang's client exited with status {completed.returncode} and no result",
            notes=[f"command: {shlex.join(argv)}", f"log tail ({log_path}):\n{tail}"],
        )
    metrics = parse_sglang_jsonl(
        output,
        requests=requests,
        workload=workload.name,
        url=base,
        model=model,
        warmup_requests=workload.warmup_requests,
    )
    metrics = metrics.model_copy(
        update={
            "client_prep_s": round(max(wall - metrics.duration_s, 0.0), 3),
            "images_sent": metrics.completed * (workload.images.per_request if workload.images else 0),
        }
    )
    if on_progress is not None:
        on_progress(metrics.completed + metrics.failed, requests, Snapshot(metrics.completed, lambda: metrics))
    if metrics.completed == 0:
        raise BenchError(
            f"all {requests} requests failed against {base} (SGLang's client)",
            notes=[f"first error: {metrics.errors[0]}"] if metrics.errors else (),
        )
    return metrics


def check_reachable(base: str, api_key: str | None = None) -> None:
    """Fail with the URL and a remedy when nothing answers `GET /v1/models` at `base` (sending `api_key`)."""
    import asyncio

    import httpx

    from servetune.bench._probe import auth_headers, probe_server

    async def probe() -> None:
        async with httpx.AsyncClient(base_url=base, headers=auth_headers(api_key)) as client:
            await probe_server(client, base)

    asyncio.run(probe())
