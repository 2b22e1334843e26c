"""`servetune tune` (run or resume a study) and `servetune tune report` (read one back).

optuna, the launcher and the benchmark are imported inside the commands, never at CLI start.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from servetune.cli._declare import with_options
from servetune.options import JSON, OUT, QUIET, opt
from servetune.settings import STORAGE, STUDY_NAME, TuneOptions


def register(app: typer.Typer) -> None:
    """Add `tune` (a group: running it tunes; `tune report` reads a study) to `app`."""
    tune_app = typer.Typer(
        help="Tune the SGLang fields the rules and you left open: every trial is a real launch and benchmark.",
        invoke_without_command=True,
        no_args_is_help=False,
        add_completion=False,
    )
    tune_app.callback(invoke_without_command=True)(tune)
    tune_app.command("report")(report)
    app.add_typer(tune_app, name="tune")


@dataclass(kw_only=True)
class TuneOutput:
    """What `tune` prints and writes besides the study."""

    out: Annotated[Path | None, OUT] = None
    as_json: Annotated[bool, JSON] = False
    quiet: Annotated[bool, QUIET] = False


@with_options(o=TuneOptions, show=TuneOutput)
def tune(ctx: typer.Context, o: TuneOptions, show: TuneOutput) -> None:
    """Run (or resume) a study; with no subcommand."""
    if ctx.invoked_subcommand is not None:
        return
    if o.model is None:
        raise typer.BadParameter("--model is required", param_hint="--model")
    from servetune.cli._output import check_output_dir, check_output_file
    from servetune.launch import LaunchOptions, check_launch
    from servetune.tuner import Tuner, write_preset
    from servetune.tuner.progress import TuneProgress

    if o.run_dir is not None:
        check_output_dir(o.run_dir, "--run-dir")
    if show.out is not None:
        check_output_file(show.out, "--out")
    check_launch(LaunchOptions(**({"sglang_cmd": o.sglang_cmd} if o.sglang_cmd else {})))  # before any directory
    progress = TuneProgress(enabled=not show.quiet)
    tuner = Tuner(o, on_event=progress.event)
    try:
        with progress:
            result = tuner.run()
    except KeyboardInterrupt as exc:
        _interrupted(exc, tuner.setup, show.as_json, confirming=tuner.confirming)
        raise
    if show.out is not None:
        path = write_preset(result, show.out)
        if not show.quiet:
            print(f"wrote {path}", file=sys.stderr)
    if show.as_json:
        print(json.dumps(result.as_json(), indent=2, default=str))
    elif not show.quiet:
        from servetune.tuner.report import print_summary

        print_summary(result)


@dataclass(kw_only=True)
class ReportOptions:
    """What `tune report` reads and writes."""

    storage: Annotated[str | None, STORAGE] = None
    study: Annotated[str | None, STUDY_NAME] = None
    out_dir: Annotated[
        Path | None,
        opt(
            "--out-dir",
            help="Write summary.json and plots here: HTML with its JavaScript embedded (plotly) and PNG "
            "(matplotlib); pip install 'servetune[report]' for them.",
        ),
    ] = None
    as_json: Annotated[bool, JSON] = False
    preset_out: Annotated[Path | None, OUT] = None


@with_options(show=ReportOptions, required=("storage",))
def report(show: ReportOptions) -> None:
    """Trials table, best vs baseline, and plots (history, Pareto front, parameter importances).

    The same storage opens in optuna-dashboard: `optuna-dashboard sqlite:///runs/tune/<study>/study.db`
    (pip install 'servetune[dashboard]').
    """
    from servetune.cli._output import check_output_dir, check_output_file
    from servetune.tuner.report import load_study_result, print_report, write_plots

    if show.preset_out is not None:
        check_output_file(show.preset_out, "--out")
    if show.out_dir is not None:
        check_output_dir(show.out_dir, "--out-dir")
    study_obj, result = load_study_result(show.storage, show.study)
    if show.preset_out is not None:
        from servetune.tuner import write_preset

        write_preset(result, show.preset_out)
    if show.as_json:
        print(json.dumps(result.as_json(), indent=2, default=str))
    else:
        print_report(result)
    if show.out_dir is not None:
        written = write_plots(study_obj, result, show.out_dir)
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        missing = _missing_plot_libraries()
        if missing:
            print(f"note: no {missing}: pip install 'servetune[report]'", file=sys.stderr)


def _interrupted(exc: BaseException, setup, as_json: bool, *, confirming: bool = False) -> None:
    """The one line (the study, how to resume it, how to read it), and `interrupted.json` in the
    study's directory: the trials finished so far, the running one failed as `interrupted` and queued
    again, or, stopped in its confirmation (`confirming`), the measurements its journal keeps."""
    from servetune.cli._interrupt import report_interrupt

    if setup is None:
        report_interrupt(exc, "tune stopped before its study was opened", "run the same command again")
        return
    from servetune.interrupts import record
    from servetune.launch import write_json
    from servetune.tuner import CONFIRM_JOURNAL

    name = setup.study_name
    try:
        finished = sum(
            t.state.is_finished() and (t.user_attrs.get("failure") or {}).get("class") != "interrupted"
            for t in setup.study.get_trials(deepcopy=False)
        )
        journal = setup.study.user_attrs.get(CONFIRM_JOURNAL) if confirming else None
    except Exception:  # a study that cannot be read now is reported without its count
        finished, journal = None, None
    kept = len(journal["done"]) if isinstance(journal, dict) and isinstance(journal.get("done"), dict) else None
    report_cmd = (
        f"servetune tune report --storage {shlex.quote(_redact(setup.storage_url))} --study {shlex.quote(name)}"
        + (" --json" if as_json else "")
    )
    if Path(setup.run_dir).is_dir():
        data = {"interrupted": record(exc, "tune"), "study": name, "storage": _redact(setup.storage_url),
                "trials_finished": finished, "report": report_cmd}  # fmt: skip
        if kept is not None:
            data["confirmation_measured"] = kept
        write_json(Path(setup.run_dir), "interrupted.json", data)
    count = f"{finished} trial(s) finished" if finished is not None else "the trials so far kept"
    then = (
        "the running trial is queued again"
        if kept is None
        else f"its unfinished confirmation keeps the {kept} measurement(s) it took and goes on from there"
    )
    report_interrupt(
        exc,
        f"tune stopped ({count} in study {name!r}; {then})",
        f"resume with the same command; read it with: {report_cmd}",
    )


def _missing_plot_libraries() -> str:
    """`PNG plots (they need matplotlib)` and/or `HTML plots (they need plotly)`, for what is not installed."""
    import importlib.util

    missing = [
        f"{kind} plots (they need {lib})"
        for kind, lib in (("PNG", "matplotlib"), ("HTML", "plotly"))
        if importlib.util.find_spec(lib) is None
    ]
    return " and no ".join(missing)


def _redact(url: str) -> str:
    from servetune.tuner import redact_url

    return redact_url(url)
