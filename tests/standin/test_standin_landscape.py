"""The stand-in's throughput depends on its flags, and the defaults are not the optimum."""

from __future__ import annotations

import subprocess

import pytest
from standin_helpers import STANDIN_CMD, drive, image_url, standin

from servetune.testing.standin._config import Knobs, build_parser, kv_capacity, resolve
from servetune.testing.standin._engine import Engine

N, CONCURRENCY, TOKENS = 64, 64, 64
SLOW = {"TIME_SCALE": 0.6}  # simulated time well above the client's own overhead on a loaded 2-core box
UNIQUE = [image_url(i) for i in range(N)]
POOL = [image_url(10**6 + i) for i in range(4)]


def test_resolution_of_unset_fields_and_the_deliberate_cap():
    """Unset fields get the stand-in's defaults; the decode graph is capped to max_running_requests."""
    ns, unknown = build_parser().parse_known_args(
        ["--model-path", "m", "--max-running-requests", "16", "--cuda-graph-max-bs-decode", "64", "--future-flag"]
    )
    r = resolve(ns)
    assert unknown == ["--future-flag"]
    assert (r["cuda_graph_max_bs_decode"], r["chunked_prefill_size"], r["mm_feature_transport"]) == (16, 8192, "cpu")
    assert r["mem_fraction_static"] == 0.8 and r["prefill_decode_interval"] == 0
    default = resolve(build_parser().parse_args(["--model-path", "m"]))
    assert default["max_running_requests"] == kv_capacity(default) // 512


def test_decode_step_cost_depends_on_the_graph_width_and_prefill():
    """A batch wider than the decode graph pays the eager-launch cost; a running prefill slows decode."""
    engine = Engine(resolve(build_parser().parse_args(["--model-path", "m"])), Knobs())
    assert engine._decode_step_ms(32, 0) == pytest.approx(11.2)
    assert engine._decode_step_ms(33, 0) == pytest.approx(19.3)
    assert engine._decode_step_ms(8, 4096) > engine._decode_step_ms(8, 0)


def _burst(*flags: str, images: int = 0, pool: int = 0) -> float:
    """Requests per second of N requests sent at once (concurrency N, as `drive` sends them) to the
    stand-in's rules in simulated time (`testing.simulated.StandinServer`: the engine's own rules,
    deterministic, so other work on the machine cannot reorder two configs)."""
    from servetune.testing.simulated import StandinServer

    server = StandinServer(argv=list(flags), input_tokens=32, output_tokens=TOKENS, images=images,
                           image_kb=len(UNIQUE[0]) * 3 / 4 / 1024, image_pool=pool)  # fmt: skip
    run = server.run([0.0] * N, seed=0)
    return N / max(r.end for r in run.records)


def test_a_wider_decode_graph_beats_the_default_at_64_concurrent():
    """Text at concurrency 64: graph 64 > default (32); a tight max_running_requests is worse."""
    default, wide = _burst(), _burst("--cuda-graph-max-bs-decode", "64")
    tight = _burst("--max-running-requests", "16")
    assert wide > 1.15 * default, (wide, default)
    assert tight < default


def test_single_use_images_prefer_cuda_ipc_and_repeated_images_prefer_the_cpu_cache():
    """Unique images: cuda_ipc > cpu; a small repeated pool: cpu (media cache) > cpu with unique images."""
    flags = ("--cuda-graph-max-bs-decode", "64")
    cpu_unique = _burst(*flags, images=1)
    ipc_unique = _burst(*flags, "--mm-feature-transport", "cuda_ipc", images=1)
    cpu_pool = _burst(*flags, images=1, pool=len(POOL))
    assert ipc_unique > 1.15 * cpu_unique, (ipc_unique, cpu_unique)
    assert cpu_pool > 1.15 * cpu_unique, (cpu_pool, cpu_unique)


def test_the_real_stand_in_serves_each_config_of_the_landscape(tmp_path):
    """The same configs on the real process (HTTP, threads, sleeps): each serves every request of a
    burst of 64, with and without images. No timing is compared here: on a shared 2-core machine one
    2-second run can land in a burst of other work (CI once read the wide graph at 67 against its usual
    84-92 req/s); the landscape's ordering is the simulated tests' above, on the engine's own rules."""
    for name, flags, images in (
        ("default", (), None),
        ("tight", ("--max-running-requests", "16"), None),
        ("ipc", ("--mm-feature-transport", "cuda_ipc"), UNIQUE),
    ):
        with standin(tmp_path / name, *flags, knobs=SLOW) as server:
            got = drive(server.url, N, CONCURRENCY, TOKENS, images=images)
        assert got["served"] == N, (name, got)


def test_too_much_static_memory_dies_at_start_with_a_cuda_oom():
    """--mem-fraction-static above 0.92 exits 1 with the CUDA OOM marker in its log."""
    out = subprocess.run(
        [*STANDIN_CMD, "--model-path", "m", "--mem-fraction-static", "0.95", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in out.stderr


def test_noise_is_seeded():
    """The same seed gives the same launch-level noise factor; another seed a different one; none by default."""
    cfg = resolve(build_parser().parse_args(["--model-path", "m"]))
    factor = lambda **kw: Engine(cfg, Knobs(**kw))._run_factor  # noqa: E731
    assert factor() == 1.0
    assert factor(noise=0.1, seed=3) == factor(noise=0.1, seed=3) != factor(noise=0.1, seed=4)


def test_sdpa_mm_attention_is_the_planted_config_twenty_times_slower():
    """`--mm-attention-backend sdpa` multiplies prefill and decode times by 20 (the runaway guard's
    case); another backend leaves the landscape as it is."""
    from servetune.testing.standin import expected_throughput

    load = dict(concurrency=64, input_tokens=128, output_tokens=64)
    base = expected_throughput([], **load).request_throughput
    slow = expected_throughput(["--mm-attention-backend", "sdpa"], **load).request_throughput
    assert expected_throughput(["--mm-attention-backend", "fa3"], **load).request_throughput == base
    assert base / slow == pytest.approx(20.0, rel=0.02)
    ns = build_parser().parse_args(["--model-path", "m", "--mm-attention-backend", "sdpa"])
    slow_engine = Engine(resolve(ns), Knobs())
    plain = Engine(resolve(build_parser().parse_args(["--model-path", "m"])), Knobs())
    assert slow_engine._decode_step_ms(8, 0) == pytest.approx(20 * plain._decode_step_ms(8, 0))
