"""YAML loading that keeps line numbers, and validation errors that point at them.

Only `yaml.safe_load` semantics: the text is composed by the safe loader (keeping every node's
position) and constructed by its safe constructor, so Python tags (`!!python/object`) are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from servetune.errors import SourceLocation, SpecError, did_you_mean

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
        for key_node, value_node in node.value:
            key = key_node.value
            spans[path + (key,)] = SourceLocation(
                filename, key_node.start_mark.line + 1, key_node.start_mark.column + 1
            )
            _walk(value_node, path + (key,), spans, filename)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            spans[path + (index,)] = SourceLocation(filename, item.start_mark.line + 1, item.start_mark.column + 1)
            _walk(item, path + (index,), spans, filename)


def load_yaml_with_spans(source: str | Path, text: str | None = None) -> tuple[Any, Spans]:
    """Parse YAML safely and return `(data, spans)`.

    Args:
        source: The file path (read unless `text` is given); used in locations.
        text: The YAML text, when it does not come from a file.

    Raises:
        SpecError: On a syntax error or an unsafe tag, with file:line:col.
    """
    filename = str(source)
    if text is None:
        try:
            text = Path(source).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecError(f"file not found: {filename}", help="check the path") from None
        except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
            raise SpecError(f"cannot read {filename}: {exc.__class__.__name__}") from None
    loader = _SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
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
    finally:
        loader.dispose()
    spans = Spans()
    if node is not None:
        spans[()] = SourceLocation(filename, node.start_mark.line + 1, node.start_mark.column + 1)
        _walk(node, (), spans, filename)
    return data, spans


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
