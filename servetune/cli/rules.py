"""`servetune rules list|show|lint` and `servetune schema`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from servetune.cli._declare import with_options
from servetune.context import RULES
from servetune.options import JSON


@dataclass(kw_only=True)
class RuleFiles:
    """The extra rule files a `rules` command reads beside the built-in ones."""

    rules: Annotated[tuple[Path, ...], RULES] = ()


@dataclass(kw_only=True)
class LintOutput:
    """How `rules lint` reports."""

    as_json: Annotated[bool, JSON] = False


def _load(files: RuleFiles):
    from servetune.catalog import available_versions, load_catalog
    from servetune.rules.loader import load_rules

    return load_rules(list(files.rules), catalogs=[load_catalog(v) for v in available_versions()])


def register(app: typer.Typer) -> None:
    """Add the `rules` group and `schema`."""
    rules = typer.Typer(help="The rules servetune resolves with (built-in and --rules files).", no_args_is_help=True)
    app.add_typer(rules, name="rules")

    @rules.command("list")
    @with_options(extra=RuleFiles)
    def list_cmd(extra: RuleFiles) -> None:
        """List every rule: id, kind, status, what it sets, summary."""
        for lr in _load(extra).rules:
            r = lr.rule
            sets = ", ".join(r.set) if r.set else "(forbid)"
            print(f"{r.id:<48} {r.kind:<7} {r.status:<7} {sets}\n{'':<48} {r.summary}")

    @rules.command("show")
    @with_options(extra=RuleFiles)
    def show_cmd(rule_id: Annotated[str, typer.Argument(help="Rule id.")], extra: RuleFiles) -> None:
        """Show a rule: summary, why, when, set, references, status and location."""
        from servetune.rules.conditions import _describe

        lr = _load(extra).get(rule_id)
        r = lr.rule
        print(f"{r.id}  [{r.kind}, {r.status}, since {r.since}]  {lr.location}")
        print(f"\n  {r.summary}\n")
        print("why:\n  " + " ".join(r.why.split()))
        print("\nwhen:\n  " + (_describe(r.when) or "always"))
        if r.set:
            print("\nset:")
            for k, v in r.set.items():
                print(f"  {k}: {v!r}" if not hasattr(v, "source") else f"  {k}: = {v.source}")
        if r.forbid:
            print("\nforbid: this combination is an error")
        if r.supersedes:
            print("\nsupersedes: " + ", ".join(r.supersedes))
        if r.sglang:
            print(f"\nsglang: {r.sglang}")
        if r.references:
            print("\nreferences:\n" + "\n".join(f"  - {ref}" for ref in r.references))

    @rules.command("lint")
    @with_options(extra=RuleFiles, out=LintOutput)
    def lint_cmd(extra: RuleFiles, out: LintOutput) -> None:
        """Run every rule over all bundled GPU x model x workload combinations; report conflicts
        and rules that never match."""
        from servetune import hardware
        from servetune.catalog import available_versions, load_catalog
        from servetune.modelinfo import bundled_models, load_model_facts
        from servetune.rules.lint import lint

        report = lint(
            _load(extra),
            gpus=[hardware.named_profile(name).gpu for name in hardware.profile_names()],
            models=[load_model_facts(name) for name in bundled_models()],
            catalogs=[load_catalog(version) for version in available_versions()],
        )
        if out.as_json:
            print(json.dumps(report.to_dict(), indent=2))
        else:
            print(report.render())
        if report.errors:
            raise typer.Exit(1)

    @app.command("schema")
    def schema_cmd(
        what: Annotated[str, typer.Argument(help="rule, preset, workload, hardware or space.")],
        out: Annotated[Optional[Path], typer.Option("--out", "-o")] = None,
    ) -> None:
        """Print the JSON Schema of a data file kind (for editor validation and docs)."""
        from servetune.docs import json_schema

        text = json.dumps(json_schema(what), indent=2) + "\n"
        if out:
            from servetune.cli._output import write_output

            write_output(out, text, "--out")
        else:
            print(text, end="")
