"""`servetune resolve` and `servetune explain`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from servetune.cli._declare import with_options
from servetune.context import ResolveOptions
from servetune.options import OUT, opt
from servetune.secrets import redact_text

OUT_PANEL = "Output"


class Format(str, Enum):
    """Output formats of `servetune resolve`."""

    table = "table"
    args = "args"
    shell = "shell"
    env = "env"
    yaml = "yaml"
    json = "json"


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def resolution_json(res) -> dict[str, Any]:
    """The `--format json` object: argv, env, decisions, skipped, facts."""
    decisions = []
    for resolved in list(res.config.fields.values()) + list(res.config.env.values()):
        d = resolved.decision
        decisions.append(
            {
                "field": resolved.key,
                "kind": resolved.kind,
                "value": resolved.value,
                "layer": d.layer,
                "source": d.source,
                "location": d.location,
                "reason": d.reason,
                "replaced": [{"value": p.value, "layer": p.layer, "source": p.source} for p in resolved.chain[:-1]],
            }
        )
    return {
        "sglang_version": res.config.sglang_version,
        "argv": res.argv(),
        "env": res.env(),
        "decisions": decisions,
        "skipped": [s.model_dump() for s in res.config.skipped],
        "facts": res.facts.model_dump(mode="json"),
    }


def _header(res) -> str:
    g, m = res.facts.gpu, res.facts.model
    return (
        f"# {m.path} ({m.type}, {m.params_b:g}B{' MoE' if m.is_moe else ''}{', multimodal' if m.multimodal else ''}) "
        f"on {g.count}x {g.name} ({g.arch}, {g.memory_mib / 1024:.1f} GiB), SGLang {res.config.sglang_version}, "
        f"workload {res.facts.workload.name}"
    )


def print_table(res, *, show_secrets: bool = False) -> None:
    """Launch line, env and the decisions table (human output); secrets as `<redacted>` unless shown."""
    import shutil

    from rich.console import Console
    from rich.table import Table

    from servetune.render import render_shell

    width = shutil.get_terminal_size((160, 24)).columns if sys.stdout.isatty() else 160
    console = Console(highlight=False, soft_wrap=True, width=max(width, 100))
    console.print(_header(res), markup=False)
    hide = (lambda text: text) if show_secrets else redact_text
    console.print(hide(render_shell(res.argv(), res.env())), markup=False)
    table = Table(title="decisions", title_justify="left", show_lines=False)
    for col in ("field", "value", "layer", "source"):
        table.add_column(col, no_wrap=True)
    table.add_column("why", overflow="fold", ratio=1)
    for resolved in list(res.config.fields.values()) + list(res.config.env.values()):
        d = resolved.decision
        replaced = f" (over {resolved.chain[-2].layer} {resolved.chain[-2].source})" if len(resolved.chain) > 1 else ""
        table.add_row(resolved.key, hide(_value_text(resolved.value)), d.layer, d.source + replaced, d.reason)
    if table.row_count:
        console.print(table)
    else:
        console.print("no rule matched and nothing was pinned: SGLang decides every field at launch", markup=False)
    for s in res.config.skipped:
        console.print(f"skipped {s.key} from {s.source}: {s.reason}", markup=False)


def emit(res, fmt: Format, out: Optional[Path], *, show_secrets: bool = False) -> None:
    """Write the resolution in `fmt` to stdout or `out`; secret values (an `api_key` pin, a token)
    are written as `<redacted>` unless `show_secrets`."""
    from servetune.render import render_config_yaml, render_env_lines, render_shell

    if fmt is Format.table:
        print_table(res, show_secrets=show_secrets)
        return
    if fmt is Format.args:
        import shlex

        text = " ".join(shlex.quote(a) for a in res.argv()) + "\n"
    elif fmt is Format.shell:
        text = render_shell(res.argv(), res.env())
    elif fmt is Format.env:
        text = render_env_lines(res.env())
    elif fmt is Format.yaml:
        import shlex

        body, rest = render_config_yaml(res.config, res.catalog, res.facts.model.path)
        env = res.env()
        cmd = " ".join(
            [
                *(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                "python -m sglang.launch_server --config",
                shlex.quote(str(out) if out else "config.yaml"),
                *(shlex.quote(a) for a in rest),
            ]
        )
        text = f"# SGLang --config file from servetune. Launch with:\n#   {cmd}\n" + body
    else:
        text = json.dumps(resolution_json(res), indent=2, default=str) + "\n"
    if not show_secrets:
        text = redact_text(text)
    if out:
        from servetune.cli._output import write_output

        write_output(out, text, "--out")
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


@dataclass(kw_only=True)
class EmitOptions:
    """How `servetune resolve` writes the launch."""

    fmt: Annotated[
        Format,
        opt(
            "--format", "-f", panel=OUT_PANEL,
            help="table (launch line + decisions), args, shell, env, yaml (SGLang --config), json.",
        ),
    ] = Format.table  # fmt: skip
    out: Annotated[Path | None, OUT] = None
    show_secrets: Annotated[
        bool,
        opt(
            "--show-secrets", panel=OUT_PANEL,
            help="Print secret values (an api_key pin, tokens) as they are; by default they read <redacted>.",
        ),
    ] = False  # fmt: skip


@dataclass(kw_only=True)
class ExplainOptions:
    """What `servetune explain` reads besides the resolution."""

    run: Annotated[
        Path | None,
        opt(
            "--run",
            panel=OUT_PANEL,
            help="A launch's run directory: also show what SGLang itself changed (/server_info).",
        ),
    ] = None


def register(app: typer.Typer) -> None:
    """Add `resolve` and `explain`."""

    @app.command("resolve")
    @with_options(target=ResolveOptions, o=EmitOptions, required=("model",))
    def resolve_cmd(target: ResolveOptions, o: EmitOptions) -> None:
        """Resolve an explained, validated SGLang launch for a model, GPU, workload and SGLang version."""
        if o.out is not None:
            from servetune.cli._output import check_output_file

            check_output_file(o.out, "--out")
        emit(target.context().resolve(), o.fmt, o.out, show_secrets=o.show_secrets)

    @app.command("explain")
    @with_options(target=ResolveOptions, o=ExplainOptions, required=("model",))
    def explain_cmd(
        target: ResolveOptions,
        o: ExplainOptions,
        field: Annotated[
            Optional[str], typer.Argument(help="SGLang field or SGLANG_* env var; all decided ones when omitted.")
        ] = None,
    ) -> None:
        """Show the decision chain behind each value: layer, rule and location, matched facts, what it replaced."""
        from servetune.cli._explain import explain

        explain(target.context().resolve(), field, o.run)
