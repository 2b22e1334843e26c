"""A capacity step for the `FakeRunner` (no process): the step's arrivals served by a simulated
batching server (`servetune.testing.simulated.BatchingServer`), as records the fake server replays
through the step's judge. The warm-up wave (no rate) gets plain metrics."""

from __future__ import annotations

from servetune.testing.simulated import BatchingServer, arrivals


def model_records(call, **server):
    """What a server of `BatchingServer(**server)` gives one capacity step (or warm-up wave) of `call`."""
    rate = call.workload.request_rate
    if rate is None:  # the warm-up wave: closed loop, judged by nothing
        return {"completed": call.total, "comparable_request_throughput": 1.0}
    return BatchingServer(**server).serve(arrivals(rate, call.total, call.workload.seed), call.workload.seed)
