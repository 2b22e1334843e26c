"""The SGLang field catalog: load the shipped snapshots, look names up, and regenerate them.

Snapshots are `servetune/data/catalog/<version>.json`, one `Catalog` per SGLang release. This
package imports only the stdlib, pydantic and servetune's schema and errors: never SGLang, which pulls in
torch and triton. `sync()` is the one place that runs SGLang, in a subprocess. `catalog.values` types a
value for a field or env var (rules and render use it).

Example:
    >>> from servetune.catalog import load_catalog, field_for_flag
    >>> catalog = load_catalog("0.5.23")
    >>> field_for_flag(catalog, "--tensor-parallel-size").name
    'tp_size'
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import json
import re
import subprocess
import sys
from pathlib import Path

from pydantic import ValidationError

from servetune.catalog.values import coerce_env, coerce_field, env_text, is_env_name, unknown_key_error
from servetune.errors import CatalogError, UnknownNameError, did_you_mean
from servetune.schema.catalog import Catalog, EnvSpec, FieldSpec
from servetune.secrets import is_secret_field, is_secret_name

__all__ = [
    "Catalog",
    "EnvSpec",
    "FieldSpec",
    "available_versions",
    "catalog_dir",
    "coerce_env",
    "coerce_field",
    "default_version",
    "dump_catalog",
    "env_text",
    "env_var",
    "field",
    "field_for_flag",
    "installed_sglang_version",
    "is_env_name",
    "load_catalog",
    "mark_secrets",
    "secret_names",
    "sync",
    "unknown_key_error",
    "version_key",
]

_SYNC_SCRIPT = Path(__file__).with_name("_sync_impl.py")


def version_key(version: str) -> tuple:
    """Sort key for release strings: `0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.23`."""
    parts = []
    for piece in re.split(r"[.+-]", version):
        match = re.fullmatch(r"(\d+)|([a-z]+)(\d*)", piece)
        if match and match.group(1) is not None:
            parts.append((1, int(match.group(1)), ""))
        elif match:
            rank = 2 if match.group(2) == "post" else 0
            parts.append((rank, int(match.group(3) or 0), match.group(2)))
        else:
            parts.append((0, 0, piece))
    return tuple(parts)


def catalog_dir() -> importlib.resources.abc.Traversable:
    """Where the shipped snapshots live (package data)."""
    return importlib.resources.files("servetune").joinpath("data", "catalog")


def available_versions() -> list[str]:
    """SGLang releases with a shipped snapshot, oldest first."""
    names = [p.name[: -len(".json")] for p in catalog_dir().iterdir() if p.name.endswith(".json")]
    return sorted(names, key=version_key)


@functools.cache
def load_catalog(version: str) -> Catalog:
    """The catalog of SGLang `version`, read once per process.

    Raises:
        UnknownNameError: no snapshot for `version`; lists the available ones.
        CatalogError: the snapshot does not match the `Catalog` schema.
    """
    available = available_versions()
    if version not in available:
        hint = did_you_mean(version, available)
        raise UnknownNameError(
            f"no SGLang field catalog for version {version!r}; available: {', '.join(available) or 'none'}",
            help=(f"did you mean {hint!r}? " if hint else "")
            + "to add a release, run `servetune catalog sync --sglang-cpu VERSION` "
            "(after `SERVETUNE_SGLANG_VERSIONS=VERSION scripts/setup_sglang_cpu.sh`)",
        )
    resource = catalog_dir().joinpath(f"{version}.json")
    try:
        return mark_secrets(Catalog.model_validate_json(resource.read_text(encoding="utf-8")))
    except ValidationError as exc:
        raise CatalogError(f"the shipped catalog {version}.json is invalid: {exc}") from exc


_TEXT_TYPES = ("str", "any", "json")


def mark_secrets(catalog: Catalog) -> Catalog:
    """`catalog` with `secret=True` on the text-typed fields and env vars that carry credentials."""
    fields = {
        name: spec.model_copy(update={"secret": True})
        for name, spec in catalog.fields.items()
        if spec.type in _TEXT_TYPES and spec.action == "store" and is_secret_field(name)
    }
    env = {
        name: spec.model_copy(update={"secret": True})
        for name, spec in catalog.env.items()
        if spec.type in _TEXT_TYPES and is_secret_name(name)
    }
    if not fields and not env:
        return catalog
    return catalog.model_copy(update={"fields": {**catalog.fields, **fields}, "env": {**catalog.env, **env}})


def secret_names(catalog: Catalog) -> frozenset[str]:
    """Names of the catalog's fields and env vars that carry credentials."""
    return frozenset(
        [n for n, s in catalog.fields.items() if s.secret] + [n for n, s in catalog.env.items() if s.secret]
    )


def installed_sglang_version() -> str | None:
    """The SGLang release installed in this environment (read from metadata, not imported), or None."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def default_version() -> str:
    """The installed SGLang release when it has a snapshot, else the newest snapshot.

    Raises:
        CatalogError: no snapshot is shipped at all.
    """
    available = available_versions()
    if not available:
        raise CatalogError("no SGLang field catalog is shipped", help="run `servetune catalog sync`")
    installed = installed_sglang_version()
    return installed if installed in available else available[-1]


def field(catalog: Catalog, name: str) -> FieldSpec:
    """The field `name` of `catalog`.

    Raises:
        UnknownNameError: not a field of this release; suggests the closest name.
    """
    spec = catalog.fields.get(name)
    if spec is None:
        raise _unknown(catalog, name, "field", catalog.fields)
    return spec


def env_var(catalog: Catalog, name: str) -> EnvSpec:
    """The environment variable `name` of `catalog`.

    Raises:
        UnknownNameError: not read by this release; suggests the closest name.
    """
    spec = catalog.env.get(name)
    if spec is None:
        raise _unknown(catalog, name, "environment variable", catalog.env)
    return spec


def field_for_flag(catalog: Catalog, flag: str) -> FieldSpec | None:
    """The field that a command-line flag sets (primary flag, alias or `--no-x`), or None.

    Only whole spellings match; SGLang's argparse also accepts unique prefixes, which
    servetune never emits. `--flag=value` is accepted and the value ignored.
    """
    return _flag_index(catalog).get(flag.split("=", 1)[0])


def dump_catalog(catalog: Catalog) -> str:
    """The canonical JSON text of a snapshot: sorted keys, one-space indent, trailing newline."""
    return json.dumps(catalog.model_dump(mode="json"), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def sync(python: str | None = None, out_dir: str | Path | None = None, *, harness_version: str | None = None) -> Path:
    """Regenerate a snapshot from a real SGLang and write `<out_dir>/<version>.json`.

    Args:
        python: a Python interpreter that can import SGLang (default: this one).
        out_dir: where to write (default: the package's `data/catalog`).
        harness_version: read this release from the CPU-only harness instead of `python`.

    Returns:
        The written file.

    Raises:
        CatalogError: SGLang could not be imported or its output is not a valid catalog.
    """
    if harness_version is not None:
        from servetune.catalog._harness import harness_command

        command = [*harness_command(harness_version), str(_SYNC_SCRIPT)]
    else:
        command = [python or sys.executable, "-W", "ignore", str(_SYNC_SCRIPT)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CatalogError(f"could not run {' '.join(command)}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise CatalogError(
            f"reading SGLang's parser failed (exit {done.returncode}): {' '.join(command)}",
            help="the Python must import sglang; for a CPU-only copy run scripts/setup_sglang_cpu.sh "
            "and pass --sglang-cpu VERSION",
            notes=[f"stderr tail:\n{tail}"] if tail else (),
        )
    try:
        catalog = Catalog.model_validate_json(done.stdout)
    except ValidationError as exc:
        raise CatalogError(f"SGLang's output is not a valid catalog: {exc}") from exc
    target_dir = Path(out_dir) if out_dir is not None else Path(str(catalog_dir()))
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{catalog.sglang_version}.json"
    target.write_text(dump_catalog(catalog), encoding="utf-8")
    load_catalog.cache_clear()
    return target


_FLAG_INDEXES: dict[int, tuple[Catalog, dict[str, FieldSpec]]] = {}


def _flag_index(catalog: Catalog) -> dict[str, FieldSpec]:
    cached = _FLAG_INDEXES.get(id(catalog))
    if cached is not None and cached[0] is catalog:
        return cached[1]
    index: dict[str, FieldSpec] = {}
    for spec in catalog.fields.values():
        for spelling in (spec.flag, *spec.aliases):
            index.setdefault(spelling, spec)
            if spec.action == "boolean_optional":
                index.setdefault("--no-" + spelling[2:], spec)
    if len(_FLAG_INDEXES) > 32:
        _FLAG_INDEXES.clear()
    _FLAG_INDEXES[id(catalog)] = (catalog, index)
    return index


def _unknown(catalog: Catalog, name: str, kind: str, known) -> UnknownNameError:
    hint = did_you_mean(name, known)
    return UnknownNameError(
        f"{name!r} is not an SGLang {catalog.sglang_version} {kind}",
        help=f"did you mean {hint!r}?" if hint else None,
        notes=[
            f"names come from servetune/data/catalog/{catalog.sglang_version}.json; "
            f"`servetune catalog show {catalog.sglang_version}` lists them"
        ],
    )
