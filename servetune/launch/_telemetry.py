"""What the server's scheduler was doing, read from the batch statistics in SGLang's log.

SGLang's scheduler logs one line per prefill batch and one every `decode_log_interval` (default
40) decode steps, as SGLang 0.5.17 writes them:

    [2026-12-01 22:40:15] Prefill batch, #new-seq: 1, #new-token: 1332, #cached-token: 24, token usage: 0.00,
        #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 463.20
    [2026-12-01 22:42:32] Decode batch, #running-req: 25, #token: 35768, token usage: 0.01, cuda graph: True,
        gen throughput (token/s): 3347.04, #queue-req: 0

(one line each in the log). 0.5.10 to 0.5.23 write the same shape: 0.5.10 lacks `#pending-token`,
0.5.23 may add `#replay-token`; hybrid models write `full token usage` / `#full token`, `swa ...`
or `mamba ...` instead of `token usage` / `#token`; disaggregation, speculative decoding and MFU
metrics add pairs; the graph label is `cpu graph` / `npu graph` off CUDA. The bracket may carry
the process's ranks (`[2026-12-01 22:42:32 DP0 TP0]`), milliseconds (`SGLANG_LOG_MS`), and the
batch word an iteration (`Decode batch [123],`, `SGLANG_LOG_FORWARD_ITERS`).

SGLang's warning of a long garbage collection (`--gc-warning-threshold-secs`) is kept too, as a record of
`kind` "gc" with its `generation` and `seconds` (its `ts` is when the collection ended).

A record is a dict: `kind` ("prefill", "decode" or "gc"), `ts` (the timestamp as local epoch seconds),
every `key: value` pair of the line under a normalized key (`_normalize_key`; `#token` becomes
`tokens`), and, when the line has them, `forward_iter` and one `<rank>_rank` per bracket rank
(`dp_rank`, `tp_rank`, ...). A field the line lacks is absent from the record: read them with
`.get()`. Stdlib only; a line that is not a scheduler line, or is garbled, gives None.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["TELEMETRY_FIELDS", "parse_scheduler_line", "read_scheduler_lines", "timed_records", "write_telemetry"]

TELEMETRY_FIELDS: tuple[str, ...] = (
    "running_req",
    "queue_req",
    "token_usage",
    "tokens",
    "gen_throughput",
    "cuda_graph",
)
"""The record fields the rest of servetune relies on (decode lines carry all six; prefill lines
all but `tokens` and `gen_throughput`)."""

_LINE = re.compile(
    r"(?:\(\w+ pid=\d+(?:,\s*ip=[\w.:]+)?\)\s*)?"  # Ray actors' prefix
    r"\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](?P<ms>\d{1,6}))?(?P<ranks>(?: +[A-Z][A-Z_]*\d+)*) *\]\s+"
    r"(?P<kind>Prefill|Decode) batch(?: ?\[(?P<iter>\d+)\])?,\s*(?P<rest>.*)"
)
_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_UNIT = re.compile(r"\s*\([^()]*\)\s*$")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_RENAMED = {"token": "tokens"}
"""Normalized keys renamed for clarity: SGLang's `#token` is the KV tokens in use."""
_MAX_LINE = 1 << 16
"""Longer lines are not scheduler lines (SGLang's are a few hundred characters)."""


def _normalize_key(raw: str) -> str:
    """`#running-req` -> `running_req`, `gen throughput (token/s)` -> `gen_throughput`: lowercase,
    without `#` and a trailing unit in parentheses, other non-alphanumerics as `_`."""
    key = _UNIT.sub("", raw.strip().replace("#", ""))
    key = _NON_ALNUM.sub("_", key.lower()).strip("_")
    return _RENAMED.get(key, key)


def _value(raw: str) -> Any:
    """int for integral text, float for other numbers, bool for True/False, else the text."""
    text = raw.strip()
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        number = float(text)
        return number if math.isfinite(number) else text
    if text in ("True", "False"):
        return text == "True"
    return text


def stamp_epoch(stamp: str, fraction: str | None = None) -> float:
    """A log stamp as SGLang's logging writes it (`2026-12-01 22:40:15`, local time) in epoch seconds, plus
    `fraction`: the digits after the second where it has them (`SGLANG_LOG_MS`: `.120`)."""
    ts = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
    return ts + int(fraction) / 10 ** len(fraction) if fraction else ts


_GC = re.compile(
    r"\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](?P<ms>\d{1,6}))?[^\]]*\].*?"
    r"LONG GARBAGE COLLECTION DETECTED \| Generation (?P<gen>\d+) \| Duration: (?P<seconds>[0-9.]+)s"
    r"(?:.*\(gcwatch pid (?P<pid>\d+) (?P<process>[^)]*)\))?"
)
"""SGLang's warning of a long garbage collection (`--gc-warning-threshold-secs`; 0.5.17 times its
HTTP/tokenizer process's), logged when the collection ends; scripts/device/gcwatch writes the same
line from every process with the process after it."""


def _parse_gc(line: str) -> dict[str, Any] | None:
    m = _GC.search(line)
    if m is None:
        return None
    record: dict[str, Any] = {"kind": "gc", "ts": stamp_epoch(m["stamp"], m["ms"]), "generation": int(m["gen"]),
                              "seconds": float(m["seconds"])}  # fmt: skip
    if m["pid"]:
        record |= {"pid": int(m["pid"]), "process": m["process"].strip()}
    return record


def _parse(line: str) -> dict[str, Any] | None:
    if len(line) > _MAX_LINE:
        return None
    if "GARBAGE COLLECTION" in line:
        return _parse_gc(line)
    if " batch" not in line:
        return None
    m = _LINE.match(line.strip())
    if m is None:
        return None
    record: dict[str, Any] = {"kind": m["kind"].lower(), "ts": stamp_epoch(m["stamp"], m["ms"])}
    for name, number in _RANK.findall(m["ranks"] or ""):
        record[f"{name.lower()}_rank"] = int(number)
    if m["iter"] is not None:
        record["forward_iter"] = int(m["iter"])
    fields = 0
    for part in m["rest"].split(","):
        key, sep, value = part.partition(":")
        name = _normalize_key(key)
        if not sep or not name or name in ("kind", "ts"):
            continue
        record[name] = _value(value)
        fields += 1
    return record if fields else None


def parse_scheduler_line(line: str) -> dict[str, Any] | None:
    """One SGLang scheduler line (`Prefill batch, ...` / `Decode batch, ...`) as a record
    (`{"kind": "decode", "ts": 1796157752.0, "running_req": 25, "tokens": 35768, ...}`; see the
    module docstring), or None for any other line. Never raises."""
    try:
        return _parse(line) if isinstance(line, str) else None
    except (ValueError, OverflowError, OSError, TypeError):
        return None


def read_scheduler_lines(path: str | os.PathLike[str], offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The records of the scheduler lines of the log at `path` from byte `offset`, and the offset
    to read from next: the end of its last complete line (a partial last line is left for the next
    call, so a growing log can be tailed). A missing file gives `([], offset)`; a file shorter than
    `offset` (rewritten) is read from its start. Bytes are decoded as UTF-8, bad ones replaced."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size < offset:
                offset = 0
            fh.seek(max(0, offset))
            data = fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    text = data[: end + 1].decode("utf-8", errors="replace")
    records = [r for line in text.splitlines() if (r := parse_scheduler_line(line)) is not None]
    return records, offset + end + 1


def _spread(records: list[dict[str, Any]]) -> list[float]:
    """Each record's time, records sharing one whole-second stamp spread evenly within it in order
    (k-th of m at ts + k/m); stamps with a fraction (`SGLANG_LOG_MS`) are kept as they are."""
    stamps = [float(r["ts"]) for r in records]
    if any(not s.is_integer() for s in stamps):
        return stamps
    counts: dict[float, int] = {}
    for s in stamps:
        counts[s] = counts.get(s, 0) + 1
    seen: dict[float, int] = {}
    spread = []
    for s in stamps:
        k = seen.get(s, 0)
        seen[s] = k + 1
        spread.append(s + k / counts[s])
    return spread


def timed_records(records: Iterable[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    """`records` each with `t`: seconds since `t0` (epoch seconds, e.g. the benchmark's start),
    rounded to 3 decimals; SGLang stamps to the second, so records sharing a second are spread evenly
    within it, in order, first; `ts` keeps the logged stamp. The records given are not changed."""
    records = list(records)
    return [
        {"t": round(at - t0, 3), **{k: v for k, v in record.items() if k != "t"}}
        for record, at in zip(records, _spread(records))
    ]


def write_telemetry(path: str | os.PathLike[str], records: Iterable[dict[str, Any]], t0: float) -> None:
    """Write `records` to `path` as JSON lines, each with `t` (`timed_records`). The records are not changed."""
    lines = [json.dumps(record) + "\n" for record in timed_records(records, t0)]
    Path(path).write_text("".join(lines), encoding="utf-8")


def read_telemetry(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records `write_telemetry` wrote to `path`; [] where it is missing or unreadable (telemetry is
    kept where the server's log could be read, and nothing depends on it being there)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError):
        return []
