"""Workload files: shipped ones (`servetune/data/workloads/*.yaml`) and the user's own.

from servetune.bench.workloads import load_workload, list_workloads
w = load_workload("single-image-stream")      # or a path: load_workload("my.yaml")
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from servetune.errors import SpecError, UnknownNameError, did_you_mean
from servetune.schema.workload import Workload

_SUFFIXES = (".yaml", ".yml")
_TRACE_SUFFIXES = (".jsonl", ".json")


def _shipped_dir() -> Path:
    return Path(str(resources.files("servetune") / "data" / "workloads"))


def _shipped_files() -> dict[str, Path]:
    return {path.stem: path for path in sorted(_shipped_dir().iterdir()) if path.suffix in _SUFFIXES}


def list_workloads() -> list[Workload]:
    """Every shipped workload, sorted by name."""
    return [load_workload_file(path) for path in _shipped_files().values()]


def workload_path(name_or_path: str | Path) -> Path:
    """The file behind a workload name or path (no parsing)."""
    text = str(name_or_path)
    candidate = Path(text)
    looks_like_path = (
        text.endswith(_SUFFIXES + _TRACE_SUFFIXES)
        or "/" in text
        or "\\" in text
        or candidate.is_file()
        or candidate.is_symlink()
        or candidate.is_dir()
    )
    if isinstance(name_or_path, Path) or looks_like_path:
        path = Path(text).expanduser()
        if not path.is_file():
            from servetune.yamlio import path_problem

            problem = path_problem(path)
            raise SpecError(
                f"workload file not found: {path}"
                if problem == "no such file"
                else f"cannot read {path}: it is {problem}",
                help="give a shipped workload name (`servetune workloads list`) or an existing .yaml file",
            )
        return path
    shipped = _shipped_files()
    if text in shipped:
        return shipped[text]
    suggestion = did_you_mean(text, shipped)
    raise UnknownNameError(
        f"unknown workload '{text}'",
        help=f"did you mean '{suggestion}'?" if suggestion else "pass a shipped name or a path to a .yaml file",
        notes=[f"available workloads: {', '.join(shipped)}", "`servetune workloads list` describes them"],
    )


def load_workload(name_or_path: str | Path | Workload) -> Workload:
    """A shipped workload by name, or a workload file by path.

    Raises:
        UnknownNameError: no shipped workload has that name (with a did-you-mean).
        SpecError: the file is missing, is not valid YAML, or does not match the schema
            (with file:line:col and the key path).
    """
    if isinstance(name_or_path, Workload):
        return name_or_path
    path = workload_path(name_or_path)
    if path.suffix in _TRACE_SUFFIXES:
        return trace_workload(path)
    return load_workload_file(path)


def trace_workload(path: Path) -> Workload:
    """A workload that replays a trace file as it is (`-w traffic.jsonl`, `-w sharegpt.json`):
    a JSON list is read as ShareGPT, JSON lines as servetune's trace format; requests = the
    trace's length, sent 64 at a time (or at `--request-rate`)."""
    from servetune.bench.trace import load_trace
    from servetune.schema.workload import TraceSpec
    from servetune.yamlio import path_problem

    try:
        with path.open("rb") as f:
            head = f.read(4096).lstrip()
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {path_problem(path, exc)}", help="pass a readable trace file") from None
    fmt = "sharegpt" if head.startswith(b"[") or b'"conversations"' in head else "jsonl"
    entries = load_trace(path, fmt)
    name = "".join(c if c.isalnum() else "-" for c in path.stem.lower()).strip("-") or "trace"
    return Workload(
        name=name if name[0].isalnum() else f"t{name}",
        summary=f"Replay of {path.name} ({len(entries)} requests, {fmt}).",
        kind="multimodal" if any(e.images for e in entries) else "text",
        requests=len(entries),
        warmup_requests=min(4, len(entries)),
        trace=TraceSpec(path=str(path.resolve()), format=fmt),
    )


def load_workload_file(path: Path) -> Workload:
    """Parse and validate one workload file."""
    from pydantic import ValidationError

    from servetune.errors import SourceLocation
    from servetune.yamlio import load_yaml_with_spans, spec_error_from_validation

    data, spans = load_yaml_with_spans(path)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise SpecError(
            f"a workload file must be a mapping of keys to values, but got {got}",
            location=SourceLocation(str(path), 1, 1),
        )
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise spec_error_from_validation(exc, data, spans, path, model=Workload, what="workload") from None
    from servetune.catalog.ranges import distribution_problem

    for key, dist in workload.tune.items():
        problem = distribution_problem(key, dist)
        if problem is not None:
            where = spans.nearest(("tune", key), SourceLocation(str(path)))
            raise SpecError(problem, location=where, key_path=f"tune.{key}", help="narrow the range")
    return with_trace(workload, path.parent) if workload.trace is not None else workload


def with_trace(workload: Workload, base: Path) -> Workload:
    """`workload` with its trace path made absolute (relative to `base`) and the trace checked now,
    so a malformed trace fails when the workload loads, with the trace's file and line."""
    from servetune.bench.trace import load_trace

    trace = workload.trace
    path = (base / trace.path).resolve()
    load_trace(path, trace.format)
    return workload.model_copy(update={"trace": trace.model_copy(update={"path": str(path)})})
