"""Typer options generated from settings dataclasses (`servetune.options`): one declaration per option.

    @app.command("bench")
    @with_options(target=ResolveOptions, cap=CapacityOptions, run=BenchOptions, required=("workload",))
    def bench(target: ResolveOptions, cap: CapacityOptions, run: BenchOptions) -> None: ...

Every field of each dataclass whose type is `Annotated[T, Opt(...)]` becomes a keyword option of the
command (its flags, help, panel, bounds and default); Typer parses the command line; the wrapper hands
the command one instance per group, built from the parsed values (a tuple field from Typer's list, an
`Opt.parse` applied). Fields without an `Opt` keep their defaults. The command's own parameters (a
`typer.Context`, say) stay as they are. Two groups declaring one field name is an error at import:
an option is declared once.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Optional, Union

import typer

from servetune.options import Opt

__all__ = ["option_fields", "with_options"]


@dataclasses.dataclass(frozen=True)
class OptionField:
    """A dataclass field that is a command-line option."""

    name: str
    type: Any
    opt: Opt
    default: Any


@functools.cache
def option_fields(cls: type) -> tuple[OptionField, ...]:
    """The fields of `cls` (inherited ones too) that carry an `Opt`, in declaration order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) is not Annotated:
            continue
        base, *meta = typing.get_args(hint)
        found = next((m for m in meta if isinstance(m, Opt)), None)
        if found is None:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = ...
        out.append(OptionField(f.name, base, found, default))
    return tuple(out)


def _is_tuple(tp: Any) -> bool:
    return typing.get_origin(tp) is tuple


def _optional_inner(tp: Any) -> Any | None:
    """T for `T | None` / `Optional[T]`, else None."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def _cli_type(f: OptionField) -> Any:
    """What Typer parses for `f`: the `Opt.cli_type`, a list for a tuple field, `Optional` where the
    default is None."""
    if f.opt.cli_type is not None:
        return Optional[f.opt.cli_type] if f.default is None or _is_tuple(f.type) else f.opt.cli_type
    if _is_tuple(f.type):
        (item, *_rest) = typing.get_args(f.type) or (str,)
        return Optional[list[item]]  # type: ignore[valid-type]
    inner = _optional_inner(f.type)
    if inner is not None:
        return Optional[inner]
    return f.type


def _parameter(f: OptionField, *, required: bool) -> inspect.Parameter:
    numeric = {k: v for k, v in (("min", f.opt.min), ("max", f.opt.max)) if v is not None}
    option = typer.Option(*f.opt.flags, help=f.opt.help, rich_help_panel=f.opt.panel, **numeric, **f.opt.extra)
    default = ... if required else (None if _is_tuple(f.type) else f.default)
    return inspect.Parameter(
        f.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[_cli_type(f), option], default=default
    )


def _value(f: OptionField, raw: Any) -> Any:
    """The field's value from what Typer parsed: left out, the field's default; else `Opt.parse` of it
    (a tuple field from Typer's list)."""
    if f.opt.cli_type is not None:
        if raw is None:
            return f.default
    elif _is_tuple(f.type):
        raw = tuple(raw or ())
    return f.opt.parse(raw) if f.opt.parse is not None and raw is not None else raw


def _evaluated(param: inspect.Parameter, func: Callable[..., Any]) -> inspect.Parameter:
    """A command's own parameter with its annotation evaluated (in the command's module) for Typer;
    the group parameters are not evaluated: their classes may live where the command is defined."""
    if isinstance(param.annotation, str):
        return param.replace(annotation=eval(param.annotation, func.__globals__))
    return param


def with_options(
    *, required: tuple[str, ...] = (), exclude: tuple[str, ...] = (), **groups: type
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the options of each dataclass in `groups` (parameter name -> class); the
    command receives one instance per group. `required`: fields the command needs on its line (Typer
    says so in `--help` and refuses the line without them); `exclude`: fields it does not offer (their
    defaults stay)."""
    fields: dict[str, tuple[str, OptionField]] = {}
    for arg, cls in groups.items():
        for f in option_fields(cls):
            if f.name in exclude:
                continue
            if f.name in fields:
                raise TypeError(f"option field {f.name!r} is declared by both {fields[f.name][0]} and {arg}")
            fields[f.name] = (arg, f)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        own = [_evaluated(p, func) for p in inspect.signature(func).parameters.values() if p.name not in groups]
        kw = inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(kind=kw) for p in own]
        params += [_parameter(f, required=name in required) for name, (_, f) in fields.items()]
        # parameters without a default first: Python's signature rules, though all are keyword-only
        ordered = [p for p in params if p.default is inspect.Parameter.empty or p.default is ...]
        ordered += [p for p in params if not (p.default is inspect.Parameter.empty or p.default is ...)]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            values: dict[str, dict[str, Any]] = {arg: {} for arg in groups}
            for name, (arg, f) in fields.items():
                values[arg][name] = _value(f, kwargs.pop(name))
            built = {arg: cls(**values[arg]) for arg, cls in groups.items()}
            return func(**built, **kwargs)

        wrapper.__signature__ = inspect.Signature(ordered)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in ordered}
        return wrapper

    return decorate
