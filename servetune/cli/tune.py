"""`servetune tune` (run or resume a study) and `servetune tune report` (read one back).

optuna, the launcher and the benchmark are imported inside the commands, never at CLI start.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from servetune.cli._options import (
    CAPACITY,
    CapacityOpts,
    ClientOpt,
    ResolveOpts,
    SglangCmdOpt,
    capacity_options,
    parse_gpu_ids,
    resolve_options,
)
from servetune.limits import MAX_REQUESTS

_SEARCH = "Search"
_STUDY = "Study and storage"
_TARGET = "Target"
_RUN = "Running trials"


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


@resolve_options(exclude=("model", "workload", "preset"))
@capacity_options()
def tune(
    ctx: typer.Context,
    opts: ResolveOpts,
    cap: CapacityOpts,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="Bundled model name, HF id or local model dir.", rich_help_panel=_TARGET),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            help="Workload name or file (its tune: block is the default space).",
            rich_help_panel=_TARGET,
        ),
    ] = "text-chat",
    preset: Annotated[
        Optional[str],
        typer.Option(
            "--preset",
            "-p",
            help="Preset applied under the trials (its tune: block adds to the space).",
            rich_help_panel=_TARGET,
        ),
    ] = None,
    trials: Annotated[
        int,
        typer.Option(
            "--trials",
            help="Launches in the study (baselines included; shared by all workers). "
            "A config proposed again is reused, not launched or counted; 20 such trials in a row end the study.",
            rich_help_panel=_SEARCH,
        ),
    ] = 20,
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="throughput, token_throughput, a Pareto pair like throughput,p99_ttft, or capacity "
            "(each trial finds the highest Poisson rate at which every latency --slo holds).",
            rich_help_panel=_SEARCH,
        ),
    ] = "throughput",
    slo: Annotated[
        Optional[list[str]],
        typer.Option(
            "--slo",
            help="Constraint METRIC<=N, e.g. p99_ttft_ms<=2000 (repeatable). With --objective capacity: latency "
            "SLOs STAT_METRIC_ms<=N (STAT p50/p90/p95/p99/mean, METRIC ttft/tpot/itl/e2e) that define the capacity.",
            rich_help_panel=_SEARCH,
        ),
    ] = None,
    space: Annotated[
        Optional[Path],
        typer.Option(
            "--space",
            help="A YAML file with a tune: block, or a shipped space (capacity-vlm, multimodal, text); replaces the "
            "default space.",
            rich_help_panel=_SEARCH,
        ),
    ] = None,
    space_set: Annotated[
        Optional[list[str]],
        typer.Option(
            "--space-set",
            help="Add or replace one dimension: "
            "'max_running_requests=int(32,512,log)', 'schedule_policy=choice(fcfs,lpm)'.",
            rich_help_panel=_SEARCH,
        ),
    ] = None,
    sampler: Annotated[str, typer.Option("--sampler", help="tpe or random.", rich_help_panel=_SEARCH)] = "tpe",
    seed: Annotated[Optional[int], typer.Option("--seed", help="Sampler seed.", rich_help_panel=_SEARCH)] = 0,
    local_trials: Annotated[
        Optional[int],
        typer.Option(
            "--local-trials",
            min=0,
            help="TPE: trials that first try one-field changes of the best config so far "
            "(default: two per searched field, at most a quarter of --trials; 0: off).",
            rich_help_panel=_SEARCH,
        ),
    ] = None,
    budget: Annotated[
        Optional[str],
        typer.Option(
            "--budget",
            help="Time budget of this run (90s, 30m, 1.5h): stop launching trials once the next one (the median "
            "so far) and the confirmation (its rounds and soaks) no longer fit, then confirm.",
            rich_help_panel=_SEARCH,
        ),
    ] = None,
    model_seed: Annotated[
        bool,
        typer.Option(
            "--model-seed/--no-model-seed",
            help="Capacity studies: model the server from the baselines' searches (decode time against the "
            "running batch, prefill stalls, its queue and KV use), narrow the space where it shows a field "
            "cannot bind, and make the model's best running limit and graph size the first sampled trial.",
            rich_help_panel=_SEARCH,
        ),
    ] = True,
    no_prune: Annotated[
        bool,
        typer.Option(
            "--no-prune",
            help="Run every benchmark to the end (no pruning of clearly worse trials).",
            rich_help_panel=_SEARCH,
        ),
    ] = False,
    confirm: Annotated[
        int,
        typer.Option(
            "--confirm",
            help="Rounds of re-measuring the finalists interleaved with the baseline (0: off).",
            rich_help_panel=_SEARCH,
        ),
    ] = 2,
    finalists: Annotated[
        int,
        typer.Option(
            "--finalists",
            min=1,
            help="Finalists confirmed at most, best first: each is re-measured against the baseline until one is "
            "confirmed better (adopted); none better keeps the baseline.",
            rich_help_panel=_SEARCH,
        ),
    ] = 3,
    confirm_step_seconds: Annotated[
        Optional[float],
        typer.Option(
            "--confirm-step-seconds",
            min=1.0,
            help="Longest run of a step in the confirmation's capacity searches (default: --step-seconds).",
            rich_help_panel=CAPACITY,
        ),
    ] = None,
    confirm_soak_seconds: Annotated[
        float,
        typer.Option(
            "--confirm-soak-seconds",
            min=0.0,
            help="After the confirmation rounds of a capacity study, soak the winner at its confirmed capacity "
            "and the baseline at the winner's rate for this many seconds (fresh launches; 0: none).",
            rich_help_panel=CAPACITY,
        ),
    ] = 300.0,
    storage: Annotated[
        Optional[str],
        typer.Option(
            "--storage",
            help="Optuna RDB URL (sqlite:///tune.db, postgresql://...); default: SQLite in the run dir.",
            rich_help_panel=_STUDY,
        ),
    ] = None,
    study: Annotated[
        Optional[str],
        typer.Option("--study", help="Study name (same name + storage = resume).", rich_help_panel=_STUDY),
    ] = None,
    run_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--run-dir",
            help="Trial logs and the default SQLite file (default runs/tune/<study>).",
            rich_help_panel=_STUDY,
        ),
    ] = None,
    gpus: Annotated[
        Optional[str],
        typer.Option(
            "--gpus",
            help="GPU ids for parallel trials, e.g. 0,1,2,3 (one set of tp GPUs per trial).",
            rich_help_panel=_RUN,
        ),
    ] = None,
    requests: Annotated[
        Optional[int],
        typer.Option(
            "--requests",
            min=1,
            max=MAX_REQUESTS,
            help="Measured requests per trial (default: the workload's tune_requests, else its requests); "
            f"at most {MAX_REQUESTS:,}.",
            rich_help_panel=_RUN,
        ),
    ] = None,
    sglang_cmd: SglangCmdOpt = None,
    client: ClientOpt = "auto",
    startup_timeout: Annotated[
        Optional[float],
        typer.Option("--startup-timeout", help="Seconds a launch may take to become ready.", rich_help_panel=_RUN),
    ] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the best config as a preset YAML here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Run (or resume) a study; with no subcommand."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None:
        raise typer.BadParameter("--model is required", param_hint="--model")
    from servetune.cli._output import check_output_dir, check_output_file
    from servetune.tuner import TuneOptions, Tuner, write_preset
    from servetune.tuner._budget import parse_duration

    if run_dir is not None:
        check_output_dir(run_dir, "--run-dir")
    if out is not None:
        check_output_file(out, "--out")
    from servetune.launch import LaunchOptions, check_launch

    check_launch(LaunchOptions(**({"sglang_cmd": sglang_cmd} if sglang_cmd else {})))  # before any directory
    from servetune.tuner.progress import TuneProgress

    options = TuneOptions(
        model=model,
        gpu=opts.gpu,
        hardware=str(opts.hardware) if opts.hardware else None,
        workload=workload,
        sglang_version=opts.sglang_version,
        preset=preset,
        sets=tuple(opts.sets or ()),
        envs=tuple(opts.envs or ()),
        nnodes=opts.nnodes,
        tp=opts.tp,
        rules=tuple(str(r) for r in opts.rules or ()),
        no_rules=opts.no_rules,
        trials=trials,
        objective=objective,
        slos=tuple(slo or ()),
        start_rate=cap.start_rate,
        resolution=cap.resolution,
        step_seconds=cap.step_seconds,
        confidence=cap.confidence,
        step_warmup_seconds=cap.step_warmup_seconds,
        soak_horizon=cap.soak_horizon,
        backlog_seconds=cap.backlog_seconds,
        warmup_wave=cap.warmup_wave,
        confirm_step_seconds=confirm_step_seconds,
        confirm_soak_seconds=confirm_soak_seconds,
        space_file=str(space) if space else None,
        space_sets=tuple(space_set or ()),
        storage=storage,
        study=study,
        run_dir=run_dir,
        gpus=parse_gpu_ids(gpus, "--gpus"),
        requests=requests,
        seed=seed,
        sglang_cmd=sglang_cmd,
        client=client,
        sampler=sampler,
        prune=not no_prune,
        confirm_rounds=confirm,
        finalists=finalists,
        startup_timeout_s=startup_timeout,
        local_trials=local_trials,
        model_seed=model_seed,
        budget_s=parse_duration(budget) if budget is not None else None,
    )
    progress = TuneProgress(enabled=not quiet)
    tuner = Tuner(options, on_event=progress.event)
    try:
        with progress:
            result = tuner.run()
    except KeyboardInterrupt as exc:
        _interrupted(exc, tuner.setup, as_json)
        raise
    if out is not None:
        path = write_preset(result, out)
        if not quiet:
            print(f"wrote {path}", file=sys.stderr)
    if as_json:
        print(json.dumps(result.as_json(), indent=2, default=str))
    elif not quiet:
        from servetune.tuner.report import print_summary

        print_summary(result)


def report(
    storage: Annotated[
        str, typer.Option("--storage", help="The study's storage URL (e.g. sqlite:///runs/tune/<study>/study.db).")
    ],
    study: Annotated[
        Optional[str], typer.Option("--study", help="Study name (optional when the storage holds one study).")
    ] = None,
    out_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--out-dir",
            help="Write summary.json and plots here: HTML with its JavaScript embedded (plotly) and PNG "
            "(matplotlib); pip install 'servetune[report]' for them.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    preset_out: Annotated[
        Optional[Path], typer.Option("--out", help="Also write the best config as a preset YAML.")
    ] = None,
) -> None:
    """Trials table, best vs baseline, and plots (history, Pareto front, parameter importances).

    The same storage opens in optuna-dashboard: `optuna-dashboard sqlite:///runs/tune/<study>/study.db`
    (pip install 'servetune[dashboard]').
    """
    from servetune.cli._output import check_output_dir, check_output_file
    from servetune.tuner.report import load_study_result, print_report, write_plots

    if preset_out is not None:
        check_output_file(preset_out, "--out")
    if out_dir is not None:
        check_output_dir(out_dir, "--out-dir")
    study_obj, result = load_study_result(storage, study)
    if preset_out is not None:
        from servetune.tuner import write_preset

        write_preset(result, preset_out)
    if as_json:
        print(json.dumps(result.as_json(), indent=2, default=str))
    else:
        print_report(result)
    if out_dir is not None:
        written = write_plots(study_obj, result, out_dir)
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        missing = _missing_plot_libraries()
        if missing:
            print(f"note: no {missing}: pip install 'servetune[report]'", file=sys.stderr)


def _interrupted(exc: BaseException, setup, as_json: bool) -> None:
    """The one line (the study, how to resume it, how to read it), and `interrupted.json` in the
    study's directory: the trials finished so far, the running one failed as `interrupted` and queued again."""
    from servetune.cli._interrupt import report_interrupt

    if setup is None:
        report_interrupt(exc, "tune stopped before its study was opened", "run the same command again")
        return
    from servetune.interrupts import record
    from servetune.launch import write_json

    name = setup.study_name
    try:
        finished = sum(
            t.state.is_finished() and (t.user_attrs.get("failure") or {}).get("class") != "interrupted"
            for t in setup.study.get_trials(deepcopy=False)
        )
    except Exception:  # a study that cannot be read now is reported without its count
        finished = None
    report_cmd = (
        f"servetune tune report --storage {shlex.quote(_redact(setup.storage_url))} --study {shlex.quote(name)}"
        + (" --json" if as_json else "")
    )
    if Path(setup.run_dir).is_dir():
        data = {"interrupted": record(exc, "tune"), "study": name, "storage": _redact(setup.storage_url),
                "trials_finished": finished, "report": report_cmd}  # fmt: skip
        write_json(Path(setup.run_dir), "interrupted.json", data)
    count = f"{finished} trial(s) finished" if finished is not None else "the trials so far kept"
    report_interrupt(
        exc,
        f"tune stopped ({count} in study {name!r}; the running trial is queued again)",
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
