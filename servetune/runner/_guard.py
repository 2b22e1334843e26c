"""The runaway guard: a measurement that runs many times slower than it should is stopped and
recorded as `too_slow` (data, not a crash), within its first wave.

On the H200 one flag (`--mm-attention-backend sdpa` on the lean bundle) made a config 18x slower
(1.05 against 19.5 req/s): its managed benchmark spent 426 s where the others spent about 50.
The guard's deadlines come from a reference rate, the best run so far (the tuner's incumbent,
`compare`'s first config) or, without one, from a rate the caller states; a config `factor`
times slower than that misses them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from servetune.runner._base import ShouldStop

__all__ = ["RUNAWAY_FACTOR", "RunawayGuard"]

RUNAWAY_FACTOR = 5.0
"""How many times slower than the reference a run may be before it is `too_slow`. The H200's
configs as good as the best read as low as 0.52 of the reference at the first wave (section 8 of
docs/h200-results.md); the slow backend was 18x slower. 5x keeps the first far inside and cuts the second."""
SLACK_S = 15.0
"""Seconds added to every deadline (start-up noise of the client, a first request's compilation)."""


@dataclass
class RunawayGuard:
    """Deadlines for one benchmark: its first wave and its whole run, in seconds from its start.

    Use `wrap(should_stop)` as the benchmark's `should_stop`; afterwards `fired` says whether it
    stopped the run and `reason` why.
    """

    wave: int
    """Completions that make the first wave (the workload's concurrency, at most its requests)."""
    first_wave_s: float
    """The first wave must complete by then."""
    total_s: float
    """The whole run must complete by then."""
    fired: bool = False
    reason: str = ""
    _t0: float = field(default=0.0, repr=False)

    @classmethod
    def from_rate(
        cls, reference_rate: float, *, requests: int, concurrency: int | None, factor: float = RUNAWAY_FACTOR
    ) -> RunawayGuard:
        """Deadlines for `requests` at `concurrency` on a server `factor` times slower than `reference_rate` req/s."""
        wave = min(concurrency or requests, requests)
        return cls(
            wave=wave,
            first_wave_s=factor * wave / reference_rate + SLACK_S,
            total_s=factor * requests / reference_rate + SLACK_S,
        )

    def wrap(self, should_stop: ShouldStop | None) -> ShouldStop:
        """`should_stop` that also stops the run at a missed deadline (the clock starts now)."""
        self._t0 = time.monotonic()

        def check(done: int, partial: Any) -> bool:
            elapsed = time.monotonic() - self._t0
            if done < self.wave and elapsed > self.first_wave_s:
                self.fired = True
                self.reason = (
                    f"too slow: {done} of the first {self.wave} requests completed in {elapsed:.0f} s "
                    f"(deadline {self.first_wave_s:.0f} s, from the reference rate)"
                )
                return True
            if elapsed > self.total_s:
                self.fired = True
                self.reason = f"too slow: {done} requests completed in {elapsed:.0f} s (deadline {self.total_s:.0f} s)"
                return True
            return bool(should_stop(done, partial)) if should_stop is not None else False

        return check
