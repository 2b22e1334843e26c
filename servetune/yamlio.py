"""YAML loading for every file a user may hand servetune: bounded, with line numbers, and with
validation errors that point at them.

Rule, preset, hardware, workload and search-space files may come from users, so loading is
bounded before anything is built: files over `MAX_BYTES`, and documents that have, once aliases
are expanded, over `MAX_YAML_NODES` nodes or `MAX_DEPTH` levels are refused with a `SpecError` naming
the file and line. Anchors and aliases stay allowed (the shipped rules use them), but an alias
counts as the whole value it repeats, so a few lines of nested aliases ("billion laughs", which
would grow to gigabytes) stop at the alias that crosses the limit. Only `yaml.safe_load` semantics:
the text is composed by the safe loader (keeping every node's position) and constructed by its
safe constructor, so Python tags (`!!python/object`) are refused. A key written twice in one
mapping, which YAML loaders resolve silently by keeping the last, is an error naming both lines.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from servetune.errors import SourceLocation, SpecError, did_you_mean

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_YAML_NODES",
    "KeyPath",
    "decode_utf8",
    "path_problem",
    "read_bytes",
    "Spans",
    "display_path",
    "format_key_path",
    "load_yaml",
    "load_yaml_with_spans",
    "spec_error_from_validation",
]

MAX_BYTES = 4 * 1024 * 1024
"""Largest YAML file servetune reads (the shipped rule files together are under 100 KiB)."""
MAX_YAML_NODES = 500_000
"""Most scalars, mappings and sequences in one document, aliases expanded (8,000 generated rules
are about 150,000)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences (the shipped files nest under 10 levels)."""

_PACKAGE_ROOT = Path(__file__).resolve().parent

KeyPath = tuple[Any, ...]

# The safe loader (libyaml's when PyYAML has it): one parse yields the node tree, for positions,
# and the data, built by the safe constructor (no Python tags).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Spans(dict):
    """Key path (tuple of keys and indexes) → `SourceLocation` of that key or item."""

    def nearest(self, path: KeyPath, default: SourceLocation) -> SourceLocation:
        """The location of `path`, or of its longest prefix that has one."""
        for end in range(len(path), -1, -1):
            loc = self.get(tuple(path[:end]))
            if loc is not None:
                return loc
        return default


def _walk(node: yaml.Node, path: KeyPath, spans: Spans, filename: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, Any], yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if isinstance(key_node, yaml.ScalarNode) and key != "<<":
                first = seen.setdefault((key_node.tag, key), key_node)
                if first is not key_node:
                    raise _duplicate_key(filename, path, key, first, key_node)
            spans[path + (key,)] = SourceLocation(
                filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1
            )
            _walk(value_node, path + (key,), spans, filename)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            spans[path + (index,)] = SourceLocation(filename, item.start_mark.line + 1, item.start_mark.column + 1)
            _walk(item, path + (index,), spans, filename)


def _duplicate_key(filename: str, path: KeyPath, key: Any, first: yaml.Node, second: yaml.Node) -> SpecError:
    line1, line2 = first.start_mark.line + 1, second.start_mark.line + 1
    return SpecError(
        f"duplicate key '{key}': line {line1} and line {line2} both set it",
        location=SourceLocation(filename, line2, second.start_mark.column + 1),
        key_path=format_key_path(path + (key,)),
        help=f"keep one of them (YAML parsers keep the last one silently; servetune refuses), "
        f"first at {filename}:{line1}:{first.start_mark.column + 1}",
    )


def display_path(path: str | Path) -> str:
    """Package files as `servetune/data/...`, other files as given."""
    p = Path(str(path))
    try:
        return str(p.resolve().relative_to(_PACKAGE_ROOT.parent))
    except (ValueError, OSError, RuntimeError):  # not ours; or a symlink loop, told when it is read
        return str(path)


def _read(source: str | Path, filename: str, max_bytes: int) -> str:
    raw = read_bytes(source, filename, max_bytes=max_bytes)
    return decode_utf8(raw, filename)


def path_problem(path: str | Path, exc: OSError | None = None) -> str:
    """Why a path cannot be read as a file, in words: `no such file`, `a broken symlink (to X)`, `a
    symlink loop`, `a directory, not a file`, `permission denied`, or the system's reason."""
    p = Path(path)
    code = getattr(exc, "errno", None)
    if code == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    if code == errno.ENOENT or (exc is None and not p.exists()):
        if p.is_symlink():
            try:
                target = os.readlink(p)
            except OSError:
                return "a broken symlink"
            try:
                p.stat()
            except OSError as inner:
                if inner.errno == errno.ELOOP:
                    return "a symlink loop (too many levels of symbolic links)"
            return f"a broken symlink (to {target})"
        return "no such file"
    if code == errno.EISDIR or (exc is None and p.is_dir()):
        return "a directory, not a file"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if code == errno.ENOTDIR:
        return "a path through something that is not a directory"
    return (exc.strerror if exc is not None and exc.strerror else str(exc)) if exc is not None else "unreadable"


def read_bytes(source: str | Path, filename: str | None = None, *, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a user's file, at most `max_bytes`; every way it cannot be read is a `SpecError`
    naming the file and the reason in words (missing, a broken symlink, a symlink loop, a directory,
    permission denied), never an `OSError`."""
    path = Path(source)
    filename = filename or str(source)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise _too_large(filename, size, max_bytes)
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError as exc:
        problem = path_problem(path, exc)
        if problem == "no such file":
            raise SpecError(f"file not found: {filename}", help="check the path") from None
        raise SpecError(f"cannot read {filename}: it is {problem}", help="check the path") from None
    except OSError as exc:
        raise SpecError(
            f"cannot read {filename}: it is {path_problem(path, exc)}"
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENOTDIR)
            else f"cannot read {filename}: {path_problem(path, exc)}",
            location=SourceLocation(filename),
            help="pass a readable file",
        ) from None
    if len(raw) > max_bytes:  # grew after stat, or a pipe that reports size 0
        raise _too_large(filename, len(raw), max_bytes)
    return raw


def decode_utf8(raw: bytes, filename: str) -> str:
    """`raw` as UTF-8 text; otherwise a `SpecError` at the first bad byte: its offset, line and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = raw.count(b"\n", 0, start) + 1
        column = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        raise SpecError(
            f"{filename} is not UTF-8 text: byte 0x{raw[start]:02x} at offset {start} (line {line}, column {column})",
            location=SourceLocation(filename, line, column),
            help="save the file as UTF-8",
        ) from None


def _too_large(filename: str, size: int, max_bytes: int) -> SpecError:
    return SpecError(
        f"{filename} is {size:,} bytes, over the {max_bytes:,}-byte limit for a YAML file",
        location=SourceLocation(filename),
        help="split it into several files (e.g. several --rules files), or check that it is the file you meant",
    )


def _check_events(loader: Any, filename: str, max_nodes: int, max_depth: int) -> None:
    """One pass over the parser's events, before any node is built: count nodes and nesting as
    they are once aliases are expanded (an alias counts the whole value of its anchor), and stop
    at the position where a limit is crossed. A few lines of nested aliases ("billion laughs")
    stop here, at the alias that crosses the limit, in microseconds."""
    total = 0
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, height)
    stack: list[list[Any]] = []  # open collections: [anchor, total at start, tallest child]

    def fail(event: Any, message: str, hint: str) -> SpecError:
        mark = event.start_mark
        return SpecError(message, location=SourceLocation(filename, mark.line + 1, mark.column + 1), help=hint)

    def add(event: Any, nodes: int, height: int) -> None:
        nonlocal total
        total += nodes
        if total > max_nodes:
            via = f" (through alias '*{event.anchor}')" if isinstance(event, yaml.AliasEvent) else ""
            raise fail(
                event,
                f"YAML expands to more than {max_nodes:,} nodes{via}",
                "split the file, or write fewer aliases: servetune bounds what a file may expand to "
                "so that a small file cannot grow into gigabytes",
            )
        if len(stack) + height > max_depth:
            raise fail(
                event,
                f"YAML nested more than {max_depth} levels deep",
                "servetune's files nest a few levels; flatten the structure",
            )
        if stack:
            stack[-1][2] = max(stack[-1][2], height)

    while (event := loader.get_event()) is not None:
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:  # the composer reports it, with its position
                continue
            add(event, *sizes[event.anchor])
        elif isinstance(event, yaml.ScalarEvent):
            add(event, 1, 0)
            if event.anchor:
                sizes[event.anchor] = (1, 0)
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            add(event, 1, 1)
            stack.append([event.anchor, total - 1, 0])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, start, tallest = stack.pop()
            if stack:
                stack[-1][2] = max(stack[-1][2], tallest + 1)
            if anchor:
                sizes[anchor] = (total - start, tallest + 1)


def load_yaml_with_spans(
    source: str | Path,
    text: str | None = None,
    *,
    max_bytes: int = MAX_BYTES,
    max_nodes: int = MAX_YAML_NODES,
    max_depth: int = MAX_DEPTH,
) -> tuple[Any, Spans]:
    """Parse YAML safely and within bounds; return `(data, spans)`.

    Args:
        source: The file path (read unless `text` is given); used in locations.
        text: The YAML text, when it does not come from a file.
        max_bytes: Refuse longer input.
        max_nodes: Refuse documents with more nodes (scalars, mappings, sequences), aliases expanded.
        max_depth: Refuse documents nested deeper, aliases expanded.

    Raises:
        SpecError: On a missing or unreadable file, input over a limit (aliases expanded), a syntax
            error, an unsafe tag or a key written twice in one mapping (both lines named), with
            file:line:col and a hint.
    """
    filename = str(source)
    if text is None:
        text = _read(source, filename, max_bytes)
    elif len(text.encode("utf-8")) > max_bytes:
        raise _too_large(filename, len(text.encode("utf-8")), max_bytes)
    try:
        events = _SAFE_LOADER(text)
        try:
            _check_events(events, filename, max_nodes, max_depth)
        finally:
            events.dispose()
        loader = _SAFE_LOADER(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = SourceLocation(filename, mark.line + 1, mark.column + 1) if mark else SourceLocation(filename)
        raise SpecError(
            f"unsafe or unknown YAML tag: {exc.problem}",
            location=where,
            help="servetune reads data with yaml.safe_load: plain mappings, lists and scalars only, no Python tags",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = SourceLocation(filename, mark.line + 1, mark.column + 1) if mark else SourceLocation(filename)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            f"YAML syntax error: {problem}", location=where, help="fix the YAML syntax at that position"
        ) from None
    spans = Spans()
    if node is not None:
        spans[()] = SourceLocation(filename, node.start_mark.line + 1, node.start_mark.column + 1)
        _walk(node, (), spans, filename)
    return data, spans


def load_yaml(source: str | Path, text: str | None = None) -> Any:
    """`load_yaml_with_spans` without the spans: bounded `yaml.safe_load` for user files.

    Raises:
        SpecError: As `load_yaml_with_spans`.
    """
    return load_yaml_with_spans(source, text)[0]


def _data_path(data: Any, loc: tuple[Any, ...]) -> KeyPath:
    """Keep only the parts of a pydantic `loc` that are real keys or indexes of `data`."""
    path: list[Any] = []
    node = data
    for part in loc:
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        ):
            path.append(part)
            node = node[part]
    return tuple(path)


def format_key_path(path: KeyPath) -> str:
    """`("rules", 0, "when")` → `rules[0].when`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _allowed_keys(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """Keys the model accepts at `loc` (the parent of an unknown key), following nested models."""
    for part in loc:
        if model is None:
            return []
        info = model.model_fields.get(part) if isinstance(part, str) else None
        if info is None:
            if isinstance(part, int):
                continue
            return []
        annotation = info.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def spec_error_from_validation(
    exc: ValidationError,
    data: Any,
    spans: Spans,
    source: str | Path,
    *,
    prefix: KeyPath = (),
    model: type[BaseModel] | None = None,
    what: str = "file",
) -> SpecError:
    """Turn the first pydantic error into a `SpecError` at the right file:line and key path."""
    errors = exc.errors()
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    loc = tuple(err.get("loc", ()))
    path = prefix + _data_path(_get(data, prefix), loc)
    location = spans.nearest(path, SourceLocation(str(source)))
    kind = err.get("type", "")
    msg = err.get("msg", "invalid value")
    help_text = None
    if kind == "extra_forbidden":
        key = loc[-1] if loc else "?"
        path = prefix + _data_path(_get(data, prefix), loc)
        location = spans.nearest(path, location)
        allowed = _allowed_keys(model, tuple(loc[:-1]))
        guess = did_you_mean(str(key), allowed) if allowed else None
        message = f"unknown key '{key}' in {what}"
        if guess:
            help_text = f"did you mean '{guess}'?"
        elif allowed:
            help_text = "allowed keys: " + ", ".join(allowed)
        else:
            help_text = "remove it (unknown keys are refused so typos never pass silently)"
        return SpecError(message, location=location, key_path=format_key_path(path), help=help_text)
    if kind == "missing":
        missing = loc[-1] if loc else "?"
        return SpecError(
            f"missing required key '{missing}' in {what}",
            location=location,
            key_path=format_key_path(path),
            help=f"add '{missing}:'",
        )
    got = err.get("input")
    got_text = "" if isinstance(got, (dict, list)) else f", but got {got!r}"
    message = f"{msg.rstrip('.')}{got_text}"
    message = message.replace("Value error, ", "")
    return SpecError(message, location=location, key_path=format_key_path(path), help=help_text)


def _get(data: Any, prefix: KeyPath) -> Any:
    node = data
    for part in prefix:
        node = node[part]
    return node
