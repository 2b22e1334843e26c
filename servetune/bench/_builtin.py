"""The builtin client: an asyncio streaming OpenAI chat client on httpx, no SGLang needed.

Shape of a run (the same as SGLang's `bench_serving`):
1. `GET /v1/models` (fails fast with the URL and a remedy when nothing answers; picks the
   model id when none is given).
2. Request bodies are built ahead of the send loop, in worker threads, into a bounded
   queue; the measured clock starts only when the queue is full, so building never stalls
   traffic. Every image is distinct (see `servetune.bench.images`).
3. `warmup_requests` requests (max 32 output tokens, distinct images), not measured.
   Before that, two one-token text requests measure the server tokenizer's tokens per
   prompt word, so that prompts carry `input_tokens` text tokens as SGLang's client sends.
4. The measured requests: Poisson arrivals at `request_rate` (or all at once), at most
   `max_concurrency` in flight, HTTP/1.1 keep-alive connections. Each request streams
   (`stream_options.include_usage`), with `temperature: 0` and `ignore_eos: true`.

Timing follows SGLang's client exactly (see `servetune.bench.metrics`). Output tokens are
the server's `usage.completion_tokens` (the requested length if the server sends no usage);
input tokens are the server's `usage.prompt_tokens`, which include the chat template and
the image tokens (the client's own estimate, flagged `input_tokens_source: client`, if not).

The hooks (`on_progress`, `should_stop`) are given a `Snapshot` of an unjudged run every 1/50 of it:
its metrics are computed only if a hook reads them, never for the progress display or the guard.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from servetune import interrupts
from servetune.bench._bodies import Bodies
from servetune.bench._probe import auth_headers, base_url_of, calibrate_tokens_per_word, probe_server
from servetune.bench.metrics import Snapshot, compute_metrics
from servetune.bench.schema import Metrics, RequestRecord
from servetune.bench.slo import LatencySlo
from servetune.bench.verdict import StepJudge
from servetune.bench.windows import loop_lag, offered_ratio
from servetune.errors import BenchError
from servetune.schema.workload import Workload


async def _send(
    client, body: bytes, record: RequestRecord, expected_output: int, timeout: float, clock0: float
) -> None:
    import httpx

    ttft = 0.0
    latency = 0.0
    output_len = expected_output
    started = time.perf_counter()
    record.start = started - clock0
    last = started
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}, timeout=timeout
        ) as response:
            if response.status_code != 200:
                detail = (await response.aread())[:200].decode("utf-8", "replace").strip()
                record.error = f"HTTP {response.status_code}: {detail}" if detail else f"HTTP {response.status_code}"
                return
            async for line in response.aiter_lines():
                line = line.strip()
                if not line:
                    continue
                now = time.perf_counter()
                latency = now - started
                if line.startswith("data:"):
                    line = line[5:].strip()
                if line == "[DONE]":
                    continue
                data = json.loads(line)
                if data.get("error"):
                    error = data["error"]
                    record.error = "stream error: " + (
                        error.get("message", str(error)) if isinstance(error, dict) else str(error)
                    )
                    return
                usage = data.get("usage") or {}
                output_len = usage.get("completion_tokens", output_len)
                if usage.get("prompt_tokens") is not None:
                    record.prompt_len = usage["prompt_tokens"]
                    record.prompt_len_from_server = True
                choices = data.get("choices") or []
                if not choices:
                    continue
                delta = choices[0].get("delta") or {}
                content = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                if content:
                    if ttft == 0.0:
                        ttft = record.ttft = now - started
                    else:
                        record.itl.append(now - last)
                    last = now
    except httpx.TimeoutException:
        record.error = f"timed out after {timeout:g} s"
        return
    except (httpx.HTTPError, ValueError, TypeError, AttributeError, KeyError) as exc:
        record.error = f"{type(exc).__name__}: {exc}".strip()
        return
    if ttft == 0.0:
        record.error = "the stream ended without any generated text"
        return
    record.success = True
    record.ttft, record.latency, record.output_len = ttft, latency, int(output_len)


async def run_builtin_async(
    url: str,
    workload: Workload,
    *,
    requests: int,
    model: str | None = None,
    run_dir: Path | None = None,
    on_progress: Callable[[int, int, Snapshot | None], None] | None = None,
    should_stop: Callable[[int, Snapshot | None], bool] | None = None,
    nonce: bytes | None = None,
    slos: Sequence[LatencySlo] = (),
    api_key: str | None = None,
    judge: StepJudge | None = None,
) -> Metrics:
    """Run `workload` against `url` (see the module docstring); the asynchronous core. `api_key` is sent
    as `Authorization: Bearer` (default: `$OPENAI_API_KEY`). `judge` (a capacity step's
    `servetune.bench.verdict.StepJudge`) looks at every request sent, every `LOOK_S`, and ends the
    run at its decision or at its `max_s`; its last verdict (`judge.last`) is the step's.

    Raises:
        servetune.interrupts.Interrupted: SIGINT or SIGTERM came (`servetune.interrupts`): every
            request task was cancelled and awaited first; `.partial` holds the metrics of what
            completed (also written to `run_dir`), None when the signal came before measuring.
    """
    metrics, signum = await _run_interruptible(
        url, workload, requests=requests, model=model, run_dir=run_dir, on_progress=on_progress,
        should_stop=should_stop, nonce=nonce, slos=slos, api_key=api_key, judge=judge,
    )  # fmt: skip
    if signum is not None:
        interrupts.mark_delivered()
        raise interrupts.Interrupted(signum, partial=metrics)
    return metrics


class _Wake:
    """What a signal does to a running benchmark (`servetune.interrupts.on_interrupt`): from the signal
    handler, wake its event loop, thread-safely; the loop then stops the measured run where it stands
    (a `None` in its completion queue) or, before it, cancels the run's task."""

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        self.loop, self.task = loop, task
        self.queue: asyncio.Queue | None = None
        self.main = threading.current_thread() is threading.main_thread()

    def __call__(self, signum: int) -> bool:
        self.loop.call_soon_threadsafe(self._wake)
        return self.main  # a loop in the main thread raises `Interrupted` itself, once stopped

    def _wake(self) -> None:
        if self.queue is not None:
            self.queue.put_nowait(None)
        elif not self.task.done():
            self.task.cancel()


async def _run_interruptible(url: str, workload: Workload, **kwargs) -> tuple[Metrics | None, int | None]:
    """(metrics, None), or (partial metrics or None, signal) when SIGINT or SIGTERM stopped the run."""
    wake = _Wake(asyncio.get_running_loop(), asyncio.current_task())
    with interrupts.on_interrupt(wake):
        try:
            metrics = await _run(url, workload, wake=wake, **kwargs)
        except asyncio.CancelledError:
            if interrupts.requested() is None:
                raise
            return None, interrupts.requested()
    return metrics, interrupts.requested()


async def _run(
    url: str,
    workload: Workload,
    *,
    requests: int,
    model: str | None,
    run_dir: Path | None,
    on_progress: Callable[[int, int, Snapshot | None], None] | None,
    should_stop: Callable[[int, Snapshot | None], bool] | None,
    nonce: bytes | None,
    slos: Sequence[LatencySlo],
    api_key: str | None,
    judge: StepJudge | None,
    wake: _Wake,
) -> Metrics:
    import httpx

    base = base_url_of(url)
    concurrency = workload.max_concurrency
    connections = concurrency or 1024
    limits = httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=KEEPALIVE_S
    )
    timeout = httpx.Timeout(workload.request_timeout_s, connect=10.0)
    finished: list[RequestRecord] = []
    sent: list[RequestRecord] = []
    async with httpx.AsyncClient(
        base_url=base, limits=limits, timeout=timeout, headers=auth_headers(api_key), http1=True, http2=False
    ) as client:
        models = await probe_server(client, base)
        model = model or (models[0] if models else "default")
        warmup = workload.warmup_requests
        ratio = await calibrate_tokens_per_word(client, model, workload.seed)
        bodies = Bodies(workload, model, requests, warmup, nonce, ratio or 1.0)
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="servetune-bodies")
        prefetch = min(requests, max(2 * (concurrency or 64), 32))
        queue: asyncio.Queue = asyncio.Queue(maxsize=prefetch)

        async def produce() -> None:
            for index in range(requests):
                await queue.put(await loop.run_in_executor(executor, bodies.build, warmup + index, False))

        producer: asyncio.Task | None = None
        try:
            warmup_t0 = time.perf_counter()
            if warmup:
                await _warmup(client, bodies, warmup, concurrency, workload.request_timeout_s, loop, executor)
            warmup_s = time.perf_counter() - warmup_t0
            producer = asyncio.create_task(produce())
            while not queue.full() and not producer.done():
                await asyncio.sleep(0.005)
            metrics = await _measure(
                client, queue, requests, workload, bodies, model, base, on_progress, should_stop, ratio, finished,
                slos, judge, sent, wake,
            )  # fmt: skip
            metrics = metrics.model_copy(update={"warmup_s": round(warmup_s, 4)})
        finally:
            if producer is not None:
                producer.cancel()
                await asyncio.gather(producer, return_exceptions=True)
            executor.shutdown(wait=False, cancel_futures=True)
    if run_dir is not None:
        (Path(run_dir) / "builtin_metrics.json").write_text(metrics.model_dump_json(indent=2) + "\n", encoding="utf-8")
        write_requests(Path(run_dir) / "requests.jsonl", sent)
    return metrics


IDLE_CHECK_S = 1.0
"""While no request completes, `should_stop` is still asked this often (seconds)."""
PROGRESS_S = 1.0
"""`on_progress` is called at least this often (seconds) while requests complete, with no metrics
(None) between its snapshots (every 1/50 of the run): a long run shows progress without the cost of
computing metrics over every finished request each time."""
KEEPALIVE_S = 2.0
"""An idle pooled connection is dropped after this many seconds, well before the server's own idle
close (SGLang's `SGLANG_TIMEOUT_KEEP_ALIVE`, 5 s by default; httpx's default is also 5 s). With both at 5 s a
request sent on a connection the server is closing fails at once with `ReadError` and no byte read:
three of 11,800 requests of the 48-limit's H200 soaks (docs/h200-results.md section 15) failed so,
and each counted as over both bounds."""
LOOP_TICK_S = 0.05
"""How often the client samples its own event loop's lag (`Metrics.loop_lag_p99_ms`): a timer every
50 ms, whose overshoot is the lag (a few hundred samples a minute, negligible work)."""
LOOK_S = 0.5
"""A step's judge looks at most this often (seconds): often enough to stop within a second of a
decision, seldom enough that judging a few thousand records does not slow the send loop."""


REQUEST_FIELDS = (
    "scheduled",
    "start",
    "ttft",
    "latency",
    "success",
    "finished",
    "output_len",
    "prompt_len",
    "images",
    "error",
)
"""What `requests.jsonl` keeps of each request (times in s on the run's clock, from its first send)."""


def write_requests(path: Path, records: list[RequestRecord]) -> None:
    """One line per measured request sent, in arrival order (an unfinished one was cancelled when
    the run stopped), so the metrics and a step's verdict can be recomputed from the raw data
    (`load_requests`). Inter-token gaps are left out (size)."""
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            row = {k: getattr(r, k) for k in REQUEST_FIELDS}
            for k in ("scheduled", "start", "ttft", "latency"):
                if row[k] is not None:
                    row[k] = round(row[k], 6)
            f.write(json.dumps(row) + "\n")


def load_requests(path: Path) -> list[RequestRecord]:
    """The records `requests.jsonl` holds (older files without `finished` or `scheduled`: every
    request listed finished, sent on time)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        fields = {k: row[k] for k in REQUEST_FIELDS if k in row}
        fields.setdefault("finished", bool(row.get("success") or row.get("error")))
        out.append(RequestRecord(**fields))
    return out


async def _warmup(client, bodies: Bodies, count: int, concurrency, timeout: float, loop, executor) -> None:
    """`count` warm-up requests, at most `concurrency` at once (1024 when unbounded, the connection
    limit); each body is built just before it is sent, so none waits in memory."""
    records = [RequestRecord() for _ in range(min(count, 64))]  # the first ones' errors, for the message
    indexes = iter(range(count))
    succeeded = 0

    async def worker() -> None:
        nonlocal succeeded
        for index in indexes:
            body, _, expected, _ = await loop.run_in_executor(executor, bodies.build, index, True)
            record = records[index] if index < len(records) else RequestRecord()
            await _send(client, body, record, expected, timeout, time.perf_counter())
            succeeded += record.success

    await asyncio.gather(*(worker() for _ in range(min(count, concurrency or 1024))))
    if not succeeded:
        raise BenchError(
            f"all {count} warmup requests failed: {records[0].error}",
            help="check the model id (--model) and that the server accepts this workload (images need a VLM)",
        )


async def _measure(
    client,
    queue,
    requests,
    workload,
    bodies,
    model,
    base,
    on_progress,
    should_stop,
    ratio,
    finished: list[RequestRecord],
    slos: Sequence[LatencySlo] = (),
    judge: StepJudge | None = None,
    records: list[RequestRecord] | None = None,
    wake: _Wake | None = None,
) -> Metrics:
    """The measured run; `finished` receives each request's record as it completes, `records` every
    request sent (in arrival order). A signal (`wake`) stops it as `should_stop` does: every request
    task is cancelled and awaited before it returns the partial metrics."""
    rng = random.Random(workload.seed + 1)
    semaphore = asyncio.Semaphore(workload.max_concurrency) if workload.max_concurrency else None
    records = [] if records is None else records
    done_event: asyncio.Queue = asyncio.Queue()
    if wake is not None:
        wake.queue = done_event
    tasks: set[asyncio.Task] = set()
    every = max(1, requests // 50)
    clock0 = time.perf_counter()
    started_at = time.time()

    def info(stopped: bool, sent_so_far: list[RequestRecord], lagged: list[float]) -> dict[str, Any]:
        return dict(
            client="builtin",
            workload=workload.name,
            url=base,
            model=model,
            max_concurrency=workload.max_concurrency,
            request_rate=workload.request_rate,
            warmup_requests=workload.warmup_requests,
            stopped_early=stopped,
            client_prep_s=round(bodies.prep_s, 4),
            text_tokens_per_word=ratio,
            offered_ratio=offered_ratio(sent_so_far),
            started_at=round(started_at, 3),
            **loop_lag(lagged),
        )

    sent = 0
    all_sent_at: float | None = None  # when the last request passed the concurrency gate (perf_counter)
    last_due: float | None = None  # when the latest Poisson arrival was due (s after clock0)

    def still_sending() -> bool:
        """Was the load still full when the newest completion seen so far arrived? Judged against the
        completions this loop has taken in, not the sender's progress now: on a loaded machine the loop
        can lag the server by a wave, and by then the sender may be done."""
        return all_sent_at is None or last_end < all_sent_at

    def measured(stopped: bool = False, end: float | None = None) -> Callable[[], Metrics]:
        """The metrics of what finished so far (to `end`, else now), as a function: it reads the prefixes
        of the lists as they are now (each only grows, and a finished record no longer changes), so taking
        one costs nothing until it is called."""
        duration = (end if end is not None else time.perf_counter()) - clock0
        n_done, n_sent, n_lags, sending = len(finished), len(records), len(lags), end is None and still_sending()

        def compute() -> Metrics:
            return compute_metrics(
                finished[:n_done], duration, requests=requests, trim=workload.steady_trim, sending=sending,
                slos=slos, **info(stopped, records[:n_sent], lags[:n_lags]),
            )  # fmt: skip

        return compute

    def partial(stopped: bool = False, end: float | None = None) -> Metrics:
        return measured(stopped, end)()

    def snapshot() -> Snapshot | None:
        """The hooks' view of the run now, its metrics computed only if a hook reads them; None in a
        judged step."""
        return None if judge is not None else Snapshot(len(finished), measured())

    async def one(record: RequestRecord, body: bytes, expected: int) -> None:
        """One request, past the concurrency gate (`send_all` took its slot)."""
        nonlocal sent, all_sent_at
        try:
            sent += 1
            if sent == requests:
                all_sent_at = time.perf_counter()
            await _send(client, body, record, expected, workload.request_timeout_s, clock0)
        finally:
            if semaphore is not None:
                semaphore.release()
            if record.success or record.error:
                record.finished = True
                done_event.put_nowait(record)

    async def send_all() -> None:
        nonlocal last_due
        for index in range(requests):
            body, images, expected, estimate = await queue.get()
            at = bodies.arrival_s(index)
            due: float | None = at
            if at is not None:  # a trace replayed at its recorded times
                await asyncio.sleep(max(0.0, clock0 + at - time.perf_counter()))
            if at is None and workload.request_rate is not None:
                # an absolute schedule: a client that falls behind catches up, and its lag is measured
                due = last_due + rng.expovariate(workload.request_rate) if last_due is not None else 0.0
                await asyncio.sleep(max(0.0, clock0 + due - time.perf_counter()))
                last_due = due
            record = RequestRecord(
                images=images, prompt_len=estimate, output_len=expected, scheduled=due,
                start=time.perf_counter() - clock0,
            )  # fmt: skip
            records.append(record)
            if semaphore is not None:
                # the gate is taken here, not in the task: no task (and no body) waits for a slot, so
                # what is held does not grow with the requests still to send
                await semaphore.acquire()
            task = asyncio.create_task(one(record, body, expected))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    lags: list[float] = []

    async def watch_loop() -> None:
        """The loop's lag, every `LOOP_TICK_S`: how late a timer due then ran."""
        while True:
            due = time.perf_counter() + LOOP_TICK_S
            await asyncio.sleep(LOOP_TICK_S)
            lags.append(max(0.0, time.perf_counter() - due))

    sender = asyncio.create_task(send_all())
    watcher = asyncio.create_task(watch_loop())
    stopped = False
    last_end = clock0
    count = 0
    idle = min(IDLE_CHECK_S, LOOK_S) if judge is not None else IDLE_CHECK_S
    looked = clock0
    progressed = clock0

    def tick() -> None:
        """A time tick of `on_progress` (no metrics) when the last call is `PROGRESS_S` old."""
        nonlocal progressed
        now = time.perf_counter()
        if on_progress is not None and now - progressed >= PROGRESS_S:
            progressed = now
            on_progress(count, requests, None)

    def judged() -> bool:
        """Whether the step's judge has decided (or its time is up); looks at most every `LOOK_S`."""
        nonlocal looked
        now = time.perf_counter()
        if judge is None or now - looked < LOOK_S:
            return False
        looked = now
        rel = now - clock0
        return judge.done(judge.look(records, rel)) or (bool(records) and rel - records[0].arrival >= judge.max_s)

    try:
        while count < requests:
            if interrupts.requested() is not None:
                stopped = True
                break
            try:
                record = await asyncio.wait_for(done_event.get(), timeout=idle)
            except asyncio.TimeoutError:
                # no completion for a while: `should_stop` still gets a look (a runaway config's first
                # wave may take minutes; its deadline must not wait for a completion). A judged step's gets
                # None: on the H200, where completions come in clumps, a soak had 207 such gaps, and a full
                # snapshot at each stalled the send loop for up to 250 ms (docs/h200-results.md section 20)
                if judged() or (should_stop is not None and should_stop(count, snapshot())):
                    stopped = True
                    break
                tick()
                continue
            except asyncio.CancelledError:
                if interrupts.requested() is None:
                    raise
                stopped = True
                break
            if record is None:  # woken by a signal (`_Wake`)
                stopped = True
                break
            count += 1
            finished.append(record)
            last_end = (
                max(last_end, clock0 + record.start + record.latency)
                if record.success
                else max(last_end, time.perf_counter())
            )
            if judged():
                stopped = True
                break
            # every `every` completions, the last, and the end of the first wave (the pruner's first look).
            # Metrics are computed only if a hook reads them (`Snapshot`), and here they recompute every
            # statistic over every record, on the send loop: on the H200 a 300 s soak's 4,300 requests
            # pooled 546,000 ITL gaps, and each of its ~41 snapshots stalled the loop longer than the last
            # (about 250 ms at the end): the client sent late and read first tokens late, and both count
            # into the TTFT judged from each scheduled arrival. A judged step (a capacity step or a soak)
            # gets None: its judge decides it.
            if (on_progress or should_stop) and (count % every == 0 or count in (requests, workload.max_concurrency)):
                view = snapshot()
                if on_progress is not None:
                    progressed = time.perf_counter()
                    on_progress(count, requests, view)
                if should_stop is not None and count < requests and should_stop(count, view):
                    stopped = True
                    break
            else:
                tick()
        if not stopped:
            await sender
    finally:
        # nothing this run started outlives it: every request task is cancelled and awaited here
        end = time.perf_counter()
        sender.cancel()
        watcher.cancel()
        pending = list(tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(sender, watcher, *pending, return_exceptions=True)
        if wake is not None:
            wake.queue = None
    if stopped:
        if judge is not None:
            judge.close(records, end - clock0)
        return partial(stopped=True)
    if judge is not None:
        judge.close(records, time.perf_counter() - clock0)
    metrics = partial(end=last_end)
    if metrics.completed == 0:
        raise BenchError(
            f"all {requests} requests failed against {base}",
            notes=[f"first error: {metrics.errors[0]}"] if metrics.errors else (),
        )
    return metrics


def run_builtin(url: str, workload: Workload, **kwargs) -> Metrics:
    """Synchronous wrapper of `run_builtin_async`; works from inside a running event loop too.
    `Interrupted` is raised here, after the event loop has ended, never from inside it."""

    def run() -> tuple[Metrics | None, int | None]:
        return asyncio.run(_run_interruptible(url, workload, **kwargs))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        metrics, signum = run()
    else:
        result: dict[str, Any] = {}

        def target() -> None:
            try:
                result["value"] = run()
            except BaseException as exc:
                result["error"] = exc

        thread = threading.Thread(target=target, name="servetune-bench")
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        metrics, signum = result["value"]
    if signum is not None:
        interrupts.mark_delivered()
        raise interrupts.Interrupted(signum, partial=metrics)
    return metrics
