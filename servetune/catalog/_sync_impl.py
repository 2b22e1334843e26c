"""Read the server fields and env vars of the installed SGLang, as catalog JSON.

Runs inside an SGLang environment (e.g. `.cache/sglang-cpu/run 0.5.23 _sync_impl.py`), so it
imports only the stdlib and SGLang: never servetune. `servetune.catalog.sync()` runs it in a
subprocess and validates its output against `servetune.schema.catalog.Catalog`.

Fields come from SGLang's own argparse parser (`ServerArgs.add_cli_args`), one per `dest`, named by
the ServerArgs field it fills (0.5.10 parses `--tp-size` into `tensor_parallel_size`, then copies it);
`resolvable` from the `Arg` metadata of `srt/arg_groups` (False in releases without it);
`config_file_ok` from SGLang's own `--config` YAML merger. Env vars come from
`sglang.srt.environ.Envs` (typed) plus every quoted `SGLANG_*` name in the package source
(read raw, so typed `str`). The output is deterministic: sorted keys, no timestamps.

Usage: python _sync_impl.py [--out FILE]   (default: stdout)
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import importlib.metadata
import inspect
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

_SKIPPED_DESTS = {"help", "config"}
_ENV_TYPES = {"EnvBool": "bool", "EnvInt": "int", "EnvFloat": "float", "EnvStr": "str", "EnvJSON": "json"}
_QUOTED_ENV_NAME = re.compile(r"""["'](SGLANG_[A-Z0-9_]*[A-Z0-9])["']""")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def to_json(value: Any) -> Any:
    """A JSON-safe, deterministic rendering of a Python default or choice."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((to_json(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value))
    if hasattr(type(value), "__struct_fields__"):
        return to_json({name: getattr(value, name) for name in type(value).__struct_fields__})
    if callable(value):
        return f"<computed: {getattr(value, '__qualname__', type(value).__name__)}>"
    return _ADDRESS.sub("", repr(value))


def sglang_version() -> str:
    """The installed SGLang release, from its dist-info (or the module when there is none)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return importlib.import_module("sglang.version").__version__


def action_kind(action: argparse.Action) -> str:
    """The catalog's `action` for an argparse action, SGLang's custom classes included."""
    kinds = [
        (argparse.BooleanOptionalAction, "boolean_optional"),
        (argparse._StoreTrueAction, "store_true"),
        (argparse._StoreFalseAction, "store_false"),
        (argparse._StoreConstAction, "store_const"),
        (argparse._AppendAction, "append"),
        (argparse._CountAction, "count"),
    ]
    for cls, kind in kinds:
        if isinstance(action, cls):
            return kind
    if action.nargs == 0:
        return "store_true" if action.const is True else "store_const"
    return "store"


def _strip_hint(hint: Any) -> Any:
    """`T` from `Annotated[T, ...]`, `Optional[T]`, and `List[T]`/`Tuple[T, ...]`."""
    while True:
        origin = typing.get_origin(hint)
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if (
            origin is typing.Annotated
            or (origin is typing.Union and len(args) == 1)
            or (origin in (list, tuple, set, frozenset) and args)
        ):
            hint = args[0]
        else:
            return hint


def value_type(action: argparse.Action, hint: Any, kind: str) -> str:
    """The catalog's value type: from the action, then the parser's `type`, then the field's type hint."""
    if kind in ("store_true", "store_false", "boolean_optional"):
        return "bool"
    if kind == "count":
        return "int"
    if action.type in (int, float, bool):
        return action.type.__name__
    if action.type is not None and getattr(action.type, "__name__", "") == "loads":
        return "json"
    hint = _strip_hint(hint)
    if typing.get_origin(hint) is typing.Literal:
        kinds = {type(v) for v in typing.get_args(hint)}
        hint = kinds.pop() if len(kinds) == 1 else Any
    if hint in (bool, int, float, str):
        return hint.__name__
    origin = typing.get_origin(hint)
    if hint is dict or origin is dict:
        return "json"
    if origin is typing.Union:
        members = {_strip_hint(a) for a in typing.get_args(hint) if a is not type(None)}
        if any(m is dict or typing.get_origin(m) is dict for m in members):
            return "json"
        return "any"
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or hasattr(hint, "__struct_fields__")):
        return "json"
    if hint is Any or hint is None:
        return "str" if action.type in (None, str) else "any"
    return "any"


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:
        hints: dict[str, Any] = {}
        for base in reversed(cls.__mro__):
            hints.update(getattr(base, "__annotations__", {}))
        return hints


def _resolvable_fields(server_args_cls: type) -> frozenset[str]:
    try:
        arg_utils = importlib.import_module("sglang.srt.arg_groups.arg_utils")
    except ImportError:
        return frozenset()
    return frozenset(arg_utils.resolvable_fields(server_args_cls))


def _config_file_rejects(parser: argparse.ArgumentParser) -> set[str]:
    """Keys that SGLang's `--config` YAML merger refuses (its own `unsupported_actions`)."""
    for module in ("sglang.srt.utils.server_args_config_parser", "sglang.srt.server_args_config_parser"):
        try:
            merger_cls = importlib.import_module(module).ConfigArgumentMerger
        except ImportError:
            continue
        return set(merger_cls(parser=parser).unsupported_actions)
    raise RuntimeError("this SGLang release has no server_args_config_parser.ConfigArgumentMerger")


def _dest_renames(server_args_cls: type, hints: dict[str, Any]) -> dict[str, str]:
    """`{dest: field}` for parser dests that `ServerArgs.from_cli_args` copies into another field
    (0.5.10: `args.tp_size = args.tensor_parallel_size`)."""
    try:
        source = inspect.getsource(server_args_cls.from_cli_args)
    except (OSError, TypeError):
        return {}
    pairs = re.findall(r"^\s*args\.(\w+)\s*=\s*args\.(\w+)\s*$", source, flags=re.MULTILINE)
    return {dest: field for field, dest in pairs if field in hints and dest not in hints}


def _help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    try:
        text = parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        text = action.help
    return " ".join(text.split())


def _is_primary(action: argparse.Action) -> tuple[bool, bool]:
    """Sort key: the action that owns a dest is not deprecated and is spelled like it."""
    deprecated = type(action).__name__.startswith("Deprecated")
    return (deprecated, "--" + action.dest.replace("_", "-") not in action.option_strings)


def collect_fields() -> dict[str, dict[str, Any]]:
    """One catalog entry per argparse `dest` of SGLang's server parser, named by its ServerArgs field."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang", allow_abbrev=True)
    ServerArgs.add_cli_args(parser)
    hints = _type_hints(ServerArgs)
    resolvable = _resolvable_fields(ServerArgs)
    rejected = _config_file_rejects(parser)
    renames = _dest_renames(ServerArgs, hints)

    by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        if action.option_strings and action.dest not in _SKIPPED_DESTS:
            by_dest.setdefault(action.dest, []).append(action)

    fields = {}
    for dest, actions in by_dest.items():
        name = renames.get(dest, dest)
        actions.sort(key=_is_primary)
        primary = actions[0]
        kind = action_kind(primary)
        long_flags = [s for s in primary.option_strings if s.startswith("--")]
        canonical = "--" + name.replace("_", "-")
        flag = canonical if canonical in long_flags else (long_flags or primary.option_strings)[0]
        aliases = [s for s in primary.option_strings if s != flag]
        if kind == "boolean_optional":
            aliases = [s for s in aliases if not s.startswith("--no-")]
        for other in actions[1:]:
            # Deprecated spellings that take the same kind of value are aliases; switches
            # that store a constant into another field's dest are not catalogued.
            if action_kind(other) == kind and other.nargs == primary.nargs:
                aliases.extend(s for s in other.option_strings if s not in aliases and s != flag)
        default = None if primary.default is argparse.SUPPRESS else primary.default
        fields[name] = {
            "name": name,
            "flag": flag,
            "aliases": aliases,
            "action": kind,
            "type": value_type(primary, hints.get(name), kind),
            "nargs": primary.nargs if kind in ("store", "append") else None,
            "choices": None
            if primary.choices is None
            else to_json(primary.choices)
            if isinstance(primary.choices, (set, frozenset))
            else [to_json(c) for c in primary.choices],
            "default": to_json(default),
            "resolvable": name in resolvable,
            "config_file_ok": dest not in rejected,
            "help": _help_text(parser, primary),
        }
    return fields


def _env_type(field: Any) -> str:
    for cls in type(field).__mro__:
        if cls.__name__ in _ENV_TYPES:
            return _ENV_TYPES[cls.__name__]
    return "any"


def collect_env() -> dict[str, dict[str, Any]]:
    """`SGLANG_*` (and other registered) env vars: typed from `Envs`, plus raw names in the source."""
    env: dict[str, dict[str, Any]] = {}
    try:
        environ = importlib.import_module("sglang.srt.environ")
    except ImportError:
        environ = None
    registry = getattr(environ, "Envs", None)
    if registry is not None:
        for name, field in vars(registry).items():
            if not isinstance(field, environ.EnvField):
                continue
            spec = {"name": name, "type": _env_type(field), "default": to_json(field.default)}
            env[name] = spec
            deprecated = getattr(field, "deprecated_name", None)
            if deprecated:
                env.setdefault(deprecated, dict(spec, name=deprecated))
    package_dir = Path(importlib.import_module("sglang").__file__).parent
    for path in sorted(package_dir.rglob("*.py")):
        for name in _QUOTED_ENV_NAME.findall(path.read_text(encoding="utf-8", errors="replace")):
            env.setdefault(name, {"name": name, "type": "str", "default": None})
    return env


def build_catalog() -> dict[str, Any]:
    """The catalog of the installed SGLang as a JSON-ready dict (the `Catalog` model's shape)."""
    version = sglang_version()
    source = (
        f"servetune catalog sync from sglang {version}: "
        "ServerArgs.add_cli_args, arg_groups Arg metadata, srt.environ.Envs"
    )
    return {
        "sglang_version": version,
        "source": source,
        "fields": dict(sorted(collect_fields().items())),
        "env": dict(sorted(collect_env().items())),
    }


def main(argv: list[str] | None = None) -> int:
    """Write the catalog JSON to `--out` (or stdout)."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", help="file to write (default: stdout)")
    args = cli.parse_args(argv)
    try:
        importlib.import_module("sglang")
    except ImportError as exc:
        print(f"cannot import sglang with {sys.executable}: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(build_catalog(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
