"""`servetune catalog`: the SGLang field catalogs (list, show, regenerate with sync)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer


def _one_line(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _field_lines(spec) -> list[str]:
    flags = " / ".join([spec.flag, *spec.aliases]) + (
        f" / --no-{spec.flag[2:]}" if spec.action == "boolean_optional" else ""
    )
    lines = [
        f"{spec.name}",
        f"  flag        {flags}",
        f"  action      {spec.action}" + (f"  nargs {spec.nargs}" if spec.nargs is not None else ""),
        f"  type        {spec.type}",
        f"  default     {json.dumps(spec.default)}"
        + ("  (auto: SGLang resolves it at launch)" if spec.default is None else ""),
    ]
    if spec.choices is not None:
        lines.append(f"  choices     {', '.join(str(c) for c in spec.choices)}")
    from servetune.catalog.ranges import value_range

    if (r := value_range(spec.name)) is not None:
        lines.append(f"  range       {r.text()}  ({r.why}; checked by servetune)")
    lines.append(
        f"  resolvable  {'yes' if spec.resolvable else 'no'}   "
        f"--config YAML: {'yes' if spec.config_file_ok else 'no (argv only)'}"
    )
    if spec.help:
        lines.append(f"  help        {spec.help}")
    return lines


def list_cmd() -> None:
    """List the SGLang releases with a catalog, with their field and env-var counts."""
    from servetune.catalog import available_versions, default_version, installed_sglang_version, load_catalog

    default = default_version()
    installed = installed_sglang_version()
    for version in available_versions():
        cat = load_catalog(version)
        marks = [m for m, on in (("default", version == default), ("installed", version == installed)) if on]
        resolvable = sum(f.resolvable for f in cat.fields.values())
        print(
            f"{version:<10} {len(cat.fields):>4} fields ({resolvable} resolvable)  {len(cat.env):>5} env vars"
            + (f"  [{', '.join(marks)}]" if marks else "")
        )


def show_cmd(
    version: Annotated[str, typer.Argument(help="SGLang release, e.g. 0.5.23 (`servetune catalog list`).")],
    name: Annotated[
        Optional[str],
        typer.Argument(
            help="A field (radix_eviction_policy), an env var (SGLANG_…) or, after `--`, a flag (-- --tp-size)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (the whole catalog, or the one entry).")] = False,
    env: Annotated[bool, typer.Option("--env", help="List the env vars instead of the fields.")] = False,
) -> None:
    """Show one release's fields (or env vars), or one entry in full."""
    from servetune.catalog import dump_catalog, env_var, field, field_for_flag, load_catalog
    from servetune.errors import UnknownNameError, did_you_mean

    cat = load_catalog(version)
    if name is None:
        if as_json:
            print(dump_catalog(cat), end="")
        elif env:
            for spec in cat.env.values():
                print(f"{spec.name:<56} {spec.type:<5} {json.dumps(spec.default)}")
        else:
            for spec in cat.fields.values():
                marks = ("R" if spec.resolvable else "-") + ("-" if spec.config_file_ok else "A")
                print(
                    f"{spec.name:<48} {marks} {spec.type:<5} {_one_line(json.dumps(spec.default), 24):<24} {spec.flag}"
                )
            print(
                f"({len(cat.fields)} fields; R = resolvable by SGLang's model overrides, "
                "A = argv only, not --config YAML)"
            )
        return
    if name.startswith("-"):
        spec = field_for_flag(cat, name)
        if spec is None:
            flags = [f for s in cat.fields.values() for f in (s.flag, *s.aliases)]
            guess = did_you_mean(name, flags)
            raise UnknownNameError(
                f"'{name}' is not an SGLang {cat.sglang_version} flag",
                help=(f"did you mean '{guess}'? " if guess else "")
                + f"`servetune catalog show {version}` lists the fields and their flags",
            )
    elif name in cat.env or (name.isupper() and name not in cat.fields):
        spec = env_var(cat, name)
    else:
        spec = field(cat, name)
    if as_json:
        print(json.dumps(spec.model_dump(mode="json"), indent=2, sort_keys=True))
    elif hasattr(spec, "flag"):
        print("\n".join(_field_lines(spec)))
    else:
        print(f"{spec.name}\n  type        {spec.type}\n  default     {json.dumps(spec.default)}")


def sync_cmd(
    python: Annotated[
        Optional[str], typer.Option("--python", help="A Python that can import sglang (default: this one).")
    ] = None,
    sglang_cpu: Annotated[
        Optional[str],
        typer.Option(
            "--sglang-cpu",
            metavar="VERSION",
            help="Read this release from the CPU-only harness (scripts/setup_sglang_cpu.sh) instead.",
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Directory to write <version>.json to (default: the package's data/catalog)."),
    ] = None,
) -> None:
    """Regenerate a catalog from a real SGLang: its argparse parser, Arg metadata and Envs registry."""
    from servetune.catalog import Catalog, sync
    from servetune.errors import ServetuneError

    if python and sglang_cpu:
        raise ServetuneError("--python and --sglang-cpu are alternatives; give one")
    if out is not None:
        from servetune.cli._output import check_output_dir

        check_output_dir(out, "--out")
    path = sync(python=python, out_dir=out, harness_version=sglang_cpu)
    cat = Catalog.model_validate_json(path.read_text(encoding="utf-8"))
    print(f"wrote {path}: SGLang {cat.sglang_version}, {len(cat.fields)} fields, {len(cat.env)} env vars")


def register(app: typer.Typer) -> None:
    """Add `catalog list|show|sync`."""
    catalog_app = typer.Typer(
        name="catalog",
        help="SGLang's server fields and SGLANG_* env vars per release: "
        "the schema every rule, pin and flag is checked against.",
        no_args_is_help=True,
    )
    app.add_typer(catalog_app)
    catalog_app.command("list")(list_cmd)
    catalog_app.command("show")(show_cmd)
    catalog_app.command("sync")(sync_cmd)
