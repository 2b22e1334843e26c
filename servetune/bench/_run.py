"""`run_benchmark` (the contract in `servetune.bench`), client choice and the cross-check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from servetune.bench.metrics import Snapshot
from servetune.bench.schema import Metrics
from servetune.bench.slo import LatencySlo
from servetune.bench.verdict import StepJudge
from servetune.bench.workloads import load_workload
from servetune.errors import BenchError, SpecError
from servetune.limits import MAX_REQUESTS
from servetune.schema.workload import Workload

CLIENTS = ("auto", "builtin", "sglang")


def choose_client(client: str, workload: Workload, *, can_stop_early: bool = False) -> str:
    """`builtin` or `sglang` for a requested `client` (see `servetune.bench` for `auto`).

    Raises:
        SpecError: `client` is not one of auto, builtin, sglang.
    """
    from servetune.bench._sglang import inexpressible_reason, sglang_client_module

    if client not in CLIENTS:
        raise SpecError(f"unknown benchmark client '{client}'", help=f"choose one of: {', '.join(CLIENTS)}")
    if client == "sglang" and workload.trace is not None:
        raise SpecError("a trace workload needs the builtin client", help="drop --client sglang")
    if client != "auto":
        return client
    if (
        workload.kind == "text"
        and not can_stop_early
        and inexpressible_reason(workload) is None
        and sglang_client_module()
    ):
        return "sglang"
    return "builtin"


def run_benchmark(
    url: str,
    workload: Workload | str | Path,
    *,
    requests: int | None = None,
    run_dir: Path | None = None,
    client: str = "auto",
    model: str | None = None,
    on_progress: Callable[[int, int, Snapshot | None], None] | None = None,
    should_stop: Callable[[int, Snapshot | None], bool] | None = None,
    slos: Sequence[LatencySlo] = (),
    api_key: str | None = None,
    judge: StepJudge | None = None,
    nonce: bytes | None = None,
) -> Metrics:
    """Drive `workload` against the server at `url` and return its metrics.

    The run shape is fixed by the workload (requests, concurrency or rate, warmup, lengths),
    so two runs of one workload are comparable; the builtin client also reports a
    steady-state window (`Metrics.steady`). See `servetune.bench` for every argument; `api_key`
    is the server's key (`--api-key`), sent by either client (default: `$OPENAI_API_KEY`). `judge`
    (a capacity step's `StepJudge`) decides when the run ends, and `nonce` seeds its images; both
    need the builtin client.
    """
    workload = load_workload(workload)
    if requests is not None and not 1 <= requests <= MAX_REQUESTS:
        raise SpecError(
            f"1 <= `--requests` <= {MAX_REQUESTS:,} must hold, but got {requests:,}",
            help="servetune.limits.MAX_REQUESTS bounds one run; split a longer measurement into several runs",
        )
    count = requests or workload.requests
    # goodput needs every request's latencies: the builtin client's records
    chosen = choose_client(client, workload, can_stop_early=should_stop is not None or bool(slos) or judge is not None)
    if chosen == "sglang" and judge is not None:
        raise SpecError("a capacity step needs the builtin client", help="drop --client sglang")
    if chosen == "sglang" and slos:
        raise SpecError(
            "--slo needs the builtin client (goodput is computed from every request's latencies)",
            help="drop --client sglang, or use --client builtin",
        )
    if run_dir is not None:
        run_dir = Path(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(f"cannot create the run directory {run_dir}: {exc.strerror or exc}") from None
        (run_dir / "workload.json").write_text(workload.model_dump_json(indent=2) + "\n", encoding="utf-8")
    if chosen == "sglang":
        import tempfile

        from servetune.bench._sglang import run_sglang

        if run_dir is None:
            with tempfile.TemporaryDirectory(prefix="servetune-bench-") as tmp:
                metrics = run_sglang(
                    url,
                    workload,
                    requests=count,
                    run_dir=Path(tmp),
                    model=model,
                    on_progress=on_progress,
                    api_key=api_key,
                )
        else:
            metrics = run_sglang(
                url, workload, requests=count, run_dir=run_dir, model=model, on_progress=on_progress, api_key=api_key
            )
    else:
        from servetune.bench._builtin import run_builtin

        metrics = run_builtin(
            url,
            workload,
            requests=count,
            model=model,
            run_dir=run_dir,
            on_progress=on_progress,
            should_stop=should_stop,
            slos=slos,
            api_key=api_key,
            judge=judge,
            nonce=nonce,
        )
    if run_dir is not None:
        (run_dir / "metrics.json").write_text(metrics.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return metrics


COMPARED = (
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "p99_e2e_latency_ms",
)


class CrossCheck(BaseModel):
    """Both clients on one server, one workload: per-metric relative difference."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    sglang: Metrics
    """SGLang's client."""
    builtin: Metrics
    """servetune's builtin client."""
    relative_difference: dict[str, float]
    """(builtin - sglang) / sglang per metric; 0.05 means the builtin figure is 5% higher."""

    def worst(self) -> tuple[str, float]:
        """The metric with the largest absolute relative difference."""
        name = max(self.relative_difference, key=lambda key: abs(self.relative_difference[key]))
        return name, self.relative_difference[name]


def relative_differences(reference: Metrics, other: Metrics) -> dict[str, float]:
    """(other - reference) / reference for each compared metric with a non-zero reference."""
    out = {}
    for name in COMPARED:
        ref, value = getattr(reference, name), getattr(other, name)
        if ref:
            out[name] = (value - ref) / ref
    return out


def cross_check(
    url: str,
    workload: Workload | str | Path,
    *,
    requests: int | None = None,
    run_dir: Path | None = None,
    model: str | None = None,
    api_key: str | None = None,
) -> CrossCheck:
    """Run SGLang's client, then the builtin one, on the same server and compare them.

    Needs SGLang's client importable here (on the GPU machine). Each client gets its own
    subfolder of `run_dir`; the comparison is written to `run_dir/cross_check.json`.

    Raises:
        BenchError: SGLang's client is unavailable or cannot express the workload.
    """
    from servetune.bench._sglang import inexpressible_reason, sglang_client_module

    workload = load_workload(workload)
    if sglang_client_module() is None:
        raise BenchError(
            "the cross-check needs SGLang's benchmark client, which is not importable here",
            help="run it where SGLang is installed (e.g. the GPU machine)",
        )
    reason = inexpressible_reason(workload)
    if reason:
        raise BenchError(f"cannot cross-check workload '{workload.name}': {reason}")
    base = Path(run_dir) if run_dir is not None else None
    sglang = run_benchmark(
        url,
        workload,
        requests=requests,
        client="sglang",
        model=model,
        run_dir=base / "sglang" if base else None,
        api_key=api_key,
    )
    builtin = run_benchmark(
        url,
        workload,
        requests=requests,
        client="builtin",
        model=model,
        run_dir=base / "builtin" if base else None,
        api_key=api_key,
    )
    result = CrossCheck(sglang=sglang, builtin=builtin, relative_difference=relative_differences(sglang, builtin))
    if base is not None:
        (base / "cross_check.json").write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return result
