"""SGLang's `bench_serving` JSONL results read into `Metrics` (its own names and definitions)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from servetune.bench.schema import LATENCIES, SUMMARY_STATS, Metrics
from servetune.errors import BenchError

__all__ = ["parse_sglang_jsonl"]


_REQUIRED_SGLANG_KEYS = (
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "input_throughput",
    "output_throughput",
)


def parse_sglang_jsonl(
    source: str | Path,
    *,
    line: int = -1,
    requests: int | None = None,
    **info,
) -> Metrics:
    """Metrics from one line of SGLang's `bench_serving` JSONL output (0.5.x keys).

    Args:
        source: the JSONL file, or the text of one line.
        line: which line of the file (the file is opened in append mode by SGLang; the last
            line is the latest run).
        requests: the `--num-prompts` of the run; `failed = requests - completed`. Without it
            the per-request `errors` of `--output-details` are counted, else failed is 0.
        info: descriptive fields (workload, url, model, warmup_requests, ...).

    Raises:
        BenchError: the file is missing or empty, a line is not JSON, or a required key is absent.
    """
    where = "<text>"
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        path = Path(source)
        where = str(path)
        if not path.is_file():
            raise BenchError(
                f"SGLang benchmark output not found: {path}",
                help="the SGLang client wrote no result; its log is beside it in the run directory",
            )
        lines = [text for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]
        if not lines:
            raise BenchError(f"SGLang benchmark output is empty: {path}")
        try:
            text = lines[line]
        except IndexError:
            raise BenchError(
                f"SGLang benchmark output has {len(lines)} line(s), but line {line} was asked for: {path}"
            ) from None
    else:
        text = source
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchError(f"SGLang benchmark output is not JSON ({exc.msg} at column {exc.colno}): {where}") from None
    missing = [key for key in _REQUIRED_SGLANG_KEYS if key not in data]
    if missing:
        raise BenchError(
            f"SGLang benchmark output lacks {', '.join(missing)}: {where}",
            help="is this a `bench_serving` result line (SGLang 0.4 or newer)?",
        )
    completed = int(data["completed"])
    if requests is None:
        if isinstance(data.get("errors"), list):
            requests = len(data["errors"])
        else:
            requests = completed
    failed = max(requests - completed, 0)
    stats = {}
    for name in LATENCIES:
        for stat in SUMMARY_STATS:
            key = f"{stat}_{name}_ms"
            if data.get(key) is not None:
                stats[key] = float(data[key])
    errors = []
    for message in data.get("errors") or []:
        if message and message not in errors and len(errors) < 5:
            errors.append(str(message).strip().splitlines()[-1] if str(message).strip() else str(message))
    total_in = int(data["total_input_tokens"])
    total_out = int(data["total_output_tokens"])
    rate = data.get("request_rate")
    info.setdefault("max_concurrency", data.get("max_concurrency"))
    info.setdefault("request_rate", float(rate) if isinstance(rate, (int, float)) and math.isfinite(rate) else None)
    return Metrics(
        client="sglang",
        requests=requests,
        completed=completed,
        failed=failed,
        duration_s=float(data["duration"]),
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        input_tokens_source="client",
        request_throughput=float(data["request_throughput"]),
        input_throughput=float(data["input_throughput"]),
        output_throughput=float(data["output_throughput"]),
        total_throughput=float(
            data.get("total_throughput", (total_in + total_out) / max(float(data["duration"]), 1e-9))
        ),
        concurrency=float(data.get("concurrency") or 0.0),
        errors=errors,
        **stats,
        **info,
    )
