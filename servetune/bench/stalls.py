"""Front-end stalls: spans in which SGLang's scheduler got no new request while the client was sending.

SGLang's HTTP server, tokenizer and multimodal processor share one Python process and its event loop (the
`TokenizerManager`); the scheduler only sees a request once that process has handed it over. When that
process pauses, every arrival in the pause waits in it: the scheduler finishes its running batch and
idles, then receives the held arrivals at once and prefills them back to back, holding decode while it
does (SGLang's default prefill-first scheduling). A long garbage collection of that process is the pause
SGLang itself warns of (`--gc-warning-threshold-secs`; its advice is `POST /freeze_gc` after a few warm-up
requests); image preprocessing on that loop would read the same.

**How a stall is read**, from one step's scheduler lines (`telemetry.jsonl`, every `Prefill batch` line:
one per prefill batch) and its requests' send times (`requests.jsonl`, the same clock): between two
consecutive prefill lines, at least `STALL_MIN_HELD` requests were sent and the first of them waited at
least `STALL_MIN_S` for the second line, while no scheduler line in the gap (nor the one that opens it)
shows a request waiting (`#queue-req` 0). A stall lasts from that first send to the prefill line.
A request that reached the scheduler is prefilled within an iteration when a running slot is free, so
arrivals with no prefill and no queue were held upstream of it. A queue means the scheduler itself held
them (a running limit, a full KV pool): that gap is not counted, so a config that queues can hide a
stall, never add one. Send times are the client's actual sends, so a client that paused sends nothing
in the gap and is not read as the server's stall. The warm-up span counts: a stall is the process's, not
the step's.

**What was measured** (`benchmarks/frontend_stalls.py` over docs/h200-evidence.tar.xz; SGLang 0.5.17,
Qwen2.5-VL-3B, one image per request at 10-20 req/s, an H200 and eleven H100s): 473 stalls in 19,855 s of steps
over 62 searches and soaks, 0.50-1.12 s long (median 0.62 s); per run one every 15-601 s (median 46 s), five
runs with none. Session 35's four launches on one H100 had one every 15-25 s. In the uvicorn access log of the
longest there (SGLang's defaults, round 2, step 07: 21 requests held 0.98 s) one POST was logged in the stalled
second against 12-18 in each second around it: the HTTP server itself was not running. Of the 2,333 requests
over a bound (of 249,816 judged; 1,735 of them over while in flight when their step's verdict stopped it), 18%
lived (arrival to end) through a stall or the 2 s after it, against 12% of all requests; on session 35's
launches 37% against 26%, on session 36's 19% against 20%. A stall adds a burst, but the bursts that
decide a capacity are mostly Poisson bursts of arrivals; the stalls are reported (`Capacity.stalls`, the
capacity table's `stalls` line and column, `tune report`), not modelled. SGLang 0.5.17 times that process's
garbage collections only with `--gc-warning-threshold-secs`; where the server logs them (that flag, or
scripts/device/gcwatch on the lent machines), each stall names the longest collection it overlapped
(`Stall.gc_s`). With every process's collections logged (session 36, an eleventh H100): 8 of 10 stalls lay on a
generation-2 collection of 0.39-0.60 s in that process, which ran one every 25-34 s under load; the scheduler and
detokenizer had none of 0.2 s or more (docs/h200-results.md section 34).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from servetune.bench.schema import RequestRecord
    from servetune.bench.slo import LatencySlo

__all__ = ["AFTER_S", "STALL_MIN_HELD", "STALL_MIN_S", "Stall", "Stalls", "frontend_stalls", "search_stalls"]

STALL_MIN_S = 0.5
"""The shortest wait of a held request read as a stall (s): while the front end runs, an arrival reaches
prefill within 0.1-0.3 s of its send (one image, 1.3k prompt tokens, on the lent H100s and H200)."""
STALL_MIN_HELD = 3
"""Requests sent in the gap, at the least, for it to count: a quiet spell at a low rate sends none."""


class Stall(BaseModel):
    """One front-end stall in one step (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    step: int = 0
    """The capacity step's index (0: not from a search)."""
    at_s: float
    """When the first held request was sent, on the step's clock (s from the step's first send)."""
    seconds: float
    """How long that request waited for the scheduler: from its send to the prefill line that ended the gap (s)."""
    held: int
    """Requests sent in the gap: held upstream of the scheduler."""
    gc_s: float | None = None
    """The longest garbage collection the server logged overlapping it (s; `kind` "gc" telemetry: SGLang's
    `--gc-warning-threshold-secs` warning, or scripts/device/gcwatch); None: none logged."""


class Stalls(BaseModel):
    """The front-end stalls of a capacity search's steps (`search_stalls`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    steps: int
    """Steps whose scheduler lines and requests were read."""
    span_s: float
    """The seconds of sending they cover (each step's first send to its last)."""
    stalls: list[Stall] = []
    """Every stall, in step order."""
    gc_logged: int = 0
    """Long garbage collections the server logged during the steps (0: none, or it was not asked to log them)."""
    judged: int = 0
    """Requests sent after the steps' warm-up span that finished, or were over a bound while in flight when their
    step ended (0: not counted) ..."""
    near: int = 0
    """... those that lived (arrival to end) through a stall or the `AFTER_S` after it ..."""
    over: int = 0
    """... those that missed an SLO's bound (a failed one missed them all) ..."""
    over_near: int = 0
    """... and those that did both: where `over_near / over` is no larger than `near / judged`, stalls do not
    explain the overs."""

    @property
    def every_s(self) -> float | None:
        """Seconds of sending per stall (None: none seen)."""
        return self.span_s / len(self.stalls) if self.stalls else None

    @property
    def median_s(self) -> float | None:
        return statistics.median(s.seconds for s in self.stalls) if self.stalls else None

    @property
    def longest(self) -> Stall | None:
        return max(self.stalls, key=lambda s: s.seconds) if self.stalls else None

    def describe(self, unit: str = "step") -> str:
        """`SGLang's front end held arrivals from its scheduler 31 time(s) in 448 s of steps (one every 14 s),
        median 0.71 s, the longest 0.98 s (21 held, step 7 at 4.1 s): ...`."""
        head = "SGLang's front end held arrivals from its scheduler"
        worst, every, median = self.longest, self.every_s, self.median_s
        if worst is None or every is None or median is None:
            return f"{head} at no time in {self.span_s:.0f} s of steps ({self.steps} read)"
        during = sum(1 for s in self.stalls if s.gc_s is not None)
        gc = (
            f"; {during} of them during one of the {self.gc_logged} long garbage collections it logged"
            if self.gc_logged
            else ""
        )
        share = (
            f"; {self.over_near} of the {self.over} requests over a bound lived through one or the {AFTER_S:g} s after "
            f"({self.over_near / self.over:.0%}), against {self.near / self.judged:.0%} of all {self.judged}"
            if self.over and self.judged
            else ""
        )
        return (
            f"{head} {len(self.stalls)} time(s) in {self.span_s:.0f} s of steps (one every {every:.0f} s), "
            f"median {median:.2f} s, the longest {worst.seconds:.2f} s ({worst.held} held, {unit} {worst.step} at "
            f"{worst.at_s:.1f} s); the held arrivals reach it as one burst of prefills{gc}"
            f"{share}"
        )


def frontend_stalls(
    telemetry: Iterable[Mapping[str, Any]],
    sends: Sequence[float],
    *,
    step: int = 0,
    min_s: float = STALL_MIN_S,
    min_held: int = STALL_MIN_HELD,
) -> list[Stall]:
    """The stalls of one step: `telemetry` its scheduler records (`t` on the step's clock, as
    `telemetry.jsonl` holds them), `sends` when each of its requests was sent (the same clock)."""
    lines = sorted((x for x in telemetry if float(x.get("t", -1.0)) >= 0.0), key=lambda x: float(x["t"]))
    collections = [x for x in telemetry if x.get("kind") == "gc" and "t" in x]
    ordered = sorted(sends)
    out: list[Stall] = []
    opened: Mapping[str, Any] | None = None
    queued = False
    for line in lines:
        waiting = int(line.get("queue_req") or 0) > 0
        if line.get("kind") != "prefill":
            queued = queued or waiting
            continue
        if opened is not None and not queued:
            a, b = float(opened["t"]), float(line["t"])
            first, last = bisect.bisect_right(ordered, a), bisect.bisect_left(ordered, b)
            if last - first >= min_held and b - ordered[first] >= min_s:
                gc = [float(g["seconds"]) for g in collections if _overlap(g, ordered[first], b)]
                out.append(Stall(step=step, at_s=ordered[first], seconds=b - ordered[first], held=last - first,
                                 gc_s=max(gc) if gc else None))  # fmt: skip
        opened, queued = line, waiting
    return out


def _overlap(gc: Mapping[str, Any], a: float, b: float) -> bool:
    """The collection (logged at its end, `t`, lasting `seconds`) overlaps [a, b]."""
    end = float(gc["t"])
    return end >= a and end - float(gc.get("seconds") or 0.0) <= b


AFTER_S = 2.0
"""Seconds after a stall that still count as near it: the held arrivals' burst of prefills holds decode for up to
2.4 s after the longest recorded stall (session 35, round 2, step 07)."""


def search_stalls(
    steps: Iterable[tuple[int, Sequence[Mapping[str, Any]], Sequence[RequestRecord], float | None]],
    *,
    slos: Sequence[LatencySlo] = (),
    warmup_s: float = 0.0,
) -> Stalls | None:
    """The stalls over a search's steps, each `(index, telemetry, records, ended_s)` (its requests as sent, on
    the step's clock, and when its verdict ended it, or None); None where no step had both (a server whose log
    servetune cannot read: nothing is made up). With `slos`, it also counts the requests sent from `warmup_s` on
    that missed a bound, and how many of them, and of all, lived (arrival to end) through a stall or the
    `AFTER_S` after it: the finished ones, and with `ended_s` those the verdict counted over while in flight
    (`verdict.over_in_flight`; a step stopped early is mostly decided on those, and stops them unfinished),
    living until the step's end."""
    from servetune.bench.slo import request_meets
    from servetune.bench.verdict import over_in_flight

    out = Stalls(steps=0, span_s=0.0)
    for index, telemetry, records, ended_s in steps:
        sends = [r.start for r in records]
        if not sends or not any(x.get("kind") == "prefill" for x in telemetry):
            continue
        found = frontend_stalls(telemetry, sends, step=index)
        out.steps += 1
        out.span_s = round(out.span_s + max(sends) - min(sends), 3)
        out.stalls += found
        out.gc_logged += sum(1 for x in telemetry if x.get("kind") == "gc" and float(x.get("t", -1.0)) >= 0.0)
        if not slos:
            continue
        windows = [(x.at_s, x.at_s + x.seconds + AFTER_S) for x in found]
        for r in records:
            if r.arrival < warmup_s:
                continue
            cut = ended_s is not None and over_in_flight(r, slos, ended_s)  # False for a finished one
            if not (r.finished or cut):
                continue
            end = ended_s if cut else r.end
            near = any(r.arrival <= b and end >= a for a, b in windows)
            over = cut or not request_meets(r, slos)
            out.judged += 1
            out.near += near
            out.over += over
            out.over_near += over and near
    return out if out.steps else None
