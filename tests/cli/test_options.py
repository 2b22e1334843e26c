"""Options declared once (`servetune.options`, `servetune.cli._declare`): every command's option list is
pinned, each flag has one declaration, and the parsed values arrive as the settings dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from servetune.cli import app
from servetune.cli._declare import option_fields, with_options
from servetune.options import opt

RESOLVE = ["--gpu", "--hardware", "--nnodes", "--no-rules", "--rules", "--sglang-version", "--tp", "-e --env",
           "-m --model", "-p --preset", "-s --set", "-w --workload"]  # fmt: skip
CAPACITY = ["--backlog-seconds", "--bracket-factor", "--cluster-seconds", "--confidence", "--resolution",
            "--soak-horizon", "--start-rate", "--step-seconds", "--step-warmup-seconds", "--warmup-wave"]  # fmt: skip
EXPECTED = {
    "bench": [*RESOLVE, *CAPACITY, "--capacity", "--client", "--cross-check", "--json", "--reference-rate",
              "--request-rate", "--run-dir", "--seed", "--server-log", "--sglang-cmd", "--slo", "--soak-seconds",
              "--soak-tries", "--url", "-n --requests"],
    "compare": [*RESOLVE, *CAPACITY, "--a", "--a-no-rules", "--a-set", "--b", "--b-no-rules", "--b-set", "--client",
                "--json", "--objective", "--rounds", "--run-dir", "--sglang-cmd", "--slo", "-n --requests"],
    "tune": [*RESOLVE, *CAPACITY, "--budget", "--client", "--confirm", "--confirm-soak-seconds",
             "--confirm-step-seconds", "--finalists", "--gpus", "--json", "--local-trials",
             "--model-seed --no-model-seed", "--objective", "--prune --no-prune", "--run-dir", "--sampler", "--seed",
             "--sglang-cmd", "--slo", "--space", "--space-set", "--startup-timeout", "--storage", "--study", "--trials",
             "-n --requests", "-o --out", "-q --quiet"],
    "launch": [*RESOLVE, "--host", "--port", "--run-dir", "--sglang-cmd", "--startup-timeout", "--stop-grace",
               "-q --quiet"],
    "resolve": [*RESOLVE, "--show-secrets", "-f --format", "-o --out"],
    "explain": [*RESOLVE, "--run"],
    "tune report": ["--json", "--out-dir", "--storage", "--study", "-o --out"],
}  # fmt: skip
SHARED_ON_PURPOSE = {"--seed": "bench: a capacity search's sequence seed; tune: the sampler's seed"}
"""Flags two commands use for different things (everything else is one declaration)."""


def _options(name: str) -> list[str]:
    import click

    command = typer.main.get_command(app)
    for part in name.split():
        command = command.get_command(click.Context(command), part)
    out = []
    for p in command.params:
        if getattr(p, "param_type_name", "") != "option" or p.name == "help":
            continue
        short = sorted(o for o in p.opts if not o.startswith("--"))
        longs = [o for o in p.opts if o.startswith("--")] + list(p.secondary_opts)
        out.append(" ".join([*short, *longs]))
    return sorted(out)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_command_offers_the_options_it_did(name):
    """The option lists, pinned: a change to one is a change to this test, on purpose."""
    assert _options(name) == sorted(EXPECTED[name])


def test_every_flag_is_declared_once():
    """The settings each command takes (the resolve options, the capacity search's, the study's and each
    command's own): a flag two of them share is one `Opt`, except the flags listed as meaning two things."""
    from servetune.cli.bench import BenchOptions
    from servetune.cli.compare import CompareOptions
    from servetune.cli.launch import ServeOptions
    from servetune.cli.resolve import EmitOptions, ExplainOptions
    from servetune.cli.rules import LintOutput, RuleFiles
    from servetune.cli.tune import ReportOptions, TuneOutput
    from servetune.context import ResolveOptions
    from servetune.settings import CapacityOptions
    from servetune.tuner import TuneOptions

    classes = (ResolveOptions, CapacityOptions, TuneOptions, BenchOptions, CompareOptions, ServeOptions, EmitOptions,
               ExplainOptions, TuneOutput, ReportOptions, RuleFiles, LintOutput)  # fmt: skip
    declared: dict[str, set[tuple]] = {}
    for cls in classes:
        for f in option_fields(cls):
            for flag in f.opt.flags:
                declared.setdefault(flag.split("/")[0], set()).add((f.opt.flags, f.opt.help, f.opt.panel))
    twice = {flag for flag, opts in declared.items() if len(opts) > 1}
    assert twice == set(SHARED_ON_PURPOSE), twice


def test_values_arrive_as_the_settings_dataclass_parsed():
    """A tuple field from a repeated option, an `Opt.parse` applied (a duration to seconds), a default
    kept, and a command's own parameters left alone."""

    @dataclass(kw_only=True)
    class Settings:
        tags: Annotated[tuple[str, ...], opt("--tag", help="t")] = ()
        budget: Annotated[float | None, opt("--budget", help="b", cli_type=str, parse=lambda t: float(t[:-1]) * 60)] = (
            None
        )
        level: Annotated[int, opt("--level", min=1, help="l")] = 3
        internal: int = 7

    seen = {}
    demo = typer.Typer()

    @demo.command()
    @with_options(s=Settings)
    def run(s: Settings, verbose: Annotated[bool, typer.Option("--verbose")] = False) -> None:
        seen.update(s=s, verbose=verbose)

    result = CliRunner().invoke(demo, ["--tag", "a", "--tag", "b", "--budget", "30m", "--verbose"])
    assert result.exit_code == 0, result.output
    assert seen == {"s": Settings(tags=("a", "b"), budget=1800.0, level=3, internal=7), "verbose": True}
    assert CliRunner().invoke(demo, ["--level", "0"]).exit_code == 2  # the bound is Typer's


def test_two_groups_may_not_declare_one_field():
    @dataclass(kw_only=True)
    class A:
        x: Annotated[int, opt("--x", help="x")] = 1

    @dataclass(kw_only=True)
    class B:
        x: Annotated[int, opt("--x-again", help="x")] = 2

    with pytest.raises(TypeError, match="'x' is declared by both a and b"):
        with_options(a=A, b=B)
