"""`servetune tune report`: the trials table, best vs baseline, and plots.

Plots: optimisation history, Pareto front (multi-objective) and parameter importances as HTML
through `optuna.visualization` (needs plotly), and the same as PNG through
`optuna.visualization.matplotlib` when matplotlib is installed (`pip install servetune[report]`).
The storage also opens in optuna-dashboard: `optuna-dashboard <storage-url>`.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from servetune.errors import TuningError, did_you_mean
from servetune.secrets import redact
from servetune.tuner._result import TuneResult, load_result
from servetune.tuner._storage import redact_url
from servetune.tuner.progress import model_lines


def load_study_result(storage: str, study: str | None):
    """(optuna Study, TuneResult) for a stored study; the name may be left out when there is one."""
    import optuna

    from servetune.tuner._storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = open_storage(storage, existing=True)
    names = [s.study_name for s in optuna.study.get_all_study_summaries(store, include_best_trial=False)]
    if study is None:
        if len(names) != 1:
            raise TuningError(
                f"{redact_url(storage)} holds {len(names)} studies; pick one with --study",
                help=f"studies: {', '.join(names) or '(none)'}",
            )
        study = names[0]
    if study not in names:
        hint = did_you_mean(study, names)
        raise TuningError(
            f"no study {study!r} in {redact_url(storage)}",
            help=(f"did you mean {hint!r}? " if hint else "") + f"studies: {', '.join(names) or '(none)'}",
        )
    s = optuna.load_study(study_name=study, storage=store)
    return s, load_result(s, storage)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_summary(result: TuneResult, console=None) -> None:
    """Best vs baseline, in a few lines."""
    console = console or _console()
    primary = result.objectives[0] if result.objectives else {"name": "?", "unit": ""}
    best, base = result.best, result.baseline
    if best is None:
        console.print("[red]no feasible trial[/]: every trial failed or broke an SLO (see `servetune tune report`)")
        return
    console.print(
        f"best: trial {best.number} ({best.source}) {primary['name']} = "
        f"{_fmt(best.values[0] if best.values else None)} {primary.get('unit', '')}"
    )
    if best.layer:
        console.print("  set: " + ", ".join(f"{k}={v}" for k, v in best.layer.items()))
    if base is not None:
        console.print(
            f"baseline (rules): trial {base.number} {primary['name']} = {_fmt(base.values[0] if base.values else None)}"
            + (f"  [{base.failure.get('class')}]" if base.failure else "")
        )
    ratio = result.ratio()
    if ratio is not None:
        spread = f" ({_confirmed(result.confirmation)})" if result.confirmation else ""
        if result.unfinished and not result.confirmation:
            spread = " (the study's own figures, not measured side by side; the confirmation below re-measures both)"
        console.print(f"tuned/baseline: [bold]{ratio:.3f}x[/]{spread}")
    for conf in result.confirmations[:-1]:
        console.print(
            f"  an earlier confirmation: trial {conf.get('chosen_trial')} {conf.get('chosen_ratio', 1.0):.3f}x "
            f"({_confirmed(conf)})"
        )
    if result.unfinished:
        console.print(_unfinished(result.unfinished))


def _unfinished(journal: dict[str, Any]) -> str:
    """A confirmation stopped part-way, as far as it measured: each config's rounds, each finalist's ratios
    to the baseline's same round, the soaks done, and where the journal has them the machines each round ran
    on (a resume elsewhere measures the baseline's round again where its finalist's runs); the same command
    resumes it."""
    plan, done = journal.get("plan") or {}, journal.get("done") or {}
    base, rounds = plan.get("baseline"), int(plan.get("rounds") or 0)
    machines = journal.get("machines") or {}

    def keys(number: Any) -> list[str]:
        return [f"{number}/{k}" for k in range(1, rounds + 1) if f"{number}/{k}" in done]

    def values(number: Any) -> list[float | None]:
        return [(done[key] or [None])[0] for key in keys(number)]

    def where(key: str) -> str:
        return f" on {machines[key][:12]}…" if machines.get(key) else ""

    parts = []
    for number in [base, *(plan.get("finalists") or [])]:
        got = values(number)
        if not got:
            continue
        text = f"trial {number}: " + ", ".join(_fmt(v) + where(key) for v, key in zip(got, keys(number)))
        if number != base:
            ratios = [v / b for v, b in zip(got, values(base)) if v and b]
            text += f" (x{', x'.join(f'{r:.3f}' for r in ratios)} the baseline's round)" if ratios else ""
        parts.append(text)
    soaks = [v for k, v in done.items() if k.startswith("soak/") and isinstance(v, dict)]
    soak_s = plan.get("soak_s") or 0
    parts += [f"soak of trial {k.get('trial')} at {_fmt(k.get('rate'))} req/s: {k.get('state')}" for k in soaks]
    pending = ""  # the baseline's soak comes last (after the winner's, when a finalist won)
    if soak_s and f"soak/{base}" not in done:
        pending = f"; the baseline's soak of {soak_s:g} s pending" if soaks else f"; soaks of {soak_s:g} s pending"
    measured = "; ".join(parts) or "nothing measured yet"
    return (
        f"[yellow]confirmation unfinished[/] ({rounds} rounds, baseline trial {base}, finalists "
        f"{plan.get('finalists')}): {measured}{pending}; the same command resumes it"
    )


def _console():
    """A console for the report: a file or pipe gets 200 columns (not rich's 80, which folds every
    params cell into a dozen lines); a terminal, or `COLUMNS`, keeps its own width."""
    import os
    import sys

    from rich.console import Console

    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)


def _soak_text(k: dict[str, Any]) -> str:
    """`; soak of trial 3 at 12.1 req/s: met` (after `15.2 undecided` when the winner stepped down; with
    `(its rounds ran on another machine; searched first on the soak's: 12.1 certified)` after the trial
    where the soak's launch searched first)."""
    before = "".join(f"{x['rate']:.4g} {x['state']}, " for x in (k.get("tried") or [])[:-1])
    searched = ""
    if "searched" in k:
        found = f"{_fmt(k['searched'])} {'certified' if k.get('certified') else 'not certified'}"
        searched = f" (its rounds ran on another machine; searched first on the soak's: {found})"
    return f"; soak of trial {k['trial']}{searched} at {before}{k['rate']:.4g} req/s: {k['state']}"


def _confirmed(conf: dict[str, Any]) -> str:
    """How a confirmation measured its chosen trial: rounds, step length, spread, soaks (or why none won)."""
    chosen = next((f for f in conf.get("finalists", []) if f["trial"] == conf.get("chosen_trial")), None)
    steps = f" with steps up to {conf['step_s']:g} s" if conf.get("step_s") else ""
    soaks = "".join(_soak_text(k) for k in conf.get("soaks") or [])
    if conf.get("soaks") and "sustained" in conf:
        held = conf["sustained"]
        soaks += f"; sustained {held:.4g} req/s" if held is not None else "; the winner held no soaked rate"
    if chosen and chosen.get("min") is not None:
        return (
            f"re-measured {len(chosen['ratios'])}x interleaved{steps}: "
            f"min {chosen['min']:.3f}, max {chosen['max']:.3f}, stdev {chosen['stdev']:.3f}{soaks}"
        )
    return (conf.get("note") or f"{conf.get('rounds')} round(s)") + (f"; re-measured{steps}" if steps else "") + soaks


def print_report(result: TuneResult) -> None:
    """The trials table, then best vs baseline."""
    from rich.table import Table

    console = _console()
    console.print(
        f"study [bold]{result.study}[/] in {redact_url(result.storage)}: model {result.meta.get('model')}, "
        f"workload {result.meta.get('workload')}, SGLang {result.meta.get('sglang_version')}"
    )
    capacity = result.meta.get("capacity")
    if capacity:
        search = capacity.get("search") or {}
        console.print(
            "capacity at " + ", ".join(capacity.get("slos") or [])
            + f": the highest Poisson rate met in two runs at which every SLO holds, sustained (search: start "
            f"{search.get('start_rate')} req/s, resolution {search.get('resolution')}, steps up to "
            f"{search.get('step_s')} s judged at {search.get('confidence')} confidence after a "
            f"{search.get('warmup_s')} s warm-up; later trials start at the incumbent's capacity)"
        )  # fmt: skip
    elif result.slos:
        console.print("SLOs: " + ", ".join(result.slos))
    table = Table(show_lines=False)
    predicted = any(t.predicted for t in result.trials)
    cols = ("#", "state", "source", *(o["name"] for o in result.objectives), *(("predicted",) if predicted else ()))
    for col in (*cols, "params", "note"):
        table.add_column(col, overflow="fold")
    best_n = result.best.number if result.best else None
    for t in result.trials:
        vals = t.values or [None] * len(result.objectives)
        state = t.state + (" *" if t.number == best_n else "")
        note = t.note
        if t.failure:
            note = (
                f"{t.failure.get('class')}: "
                f"{str(t.failure.get('message', '')).splitlines()[0][:80] if t.failure.get('message') else ''}"
                + (f"; {note}" if note else "")
            )
        params = ", ".join(f"{k}={'unset' if v is None else _fmt(v)}" for k, v in t.params.items())
        if t.fixed:
            params += (
                ("; " if params else "")
                + "fixed: "
                + ", ".join(f"{k}={'unset' if v is None else v}" for k, v in t.fixed.items())
            )
        extra = (_fmt(t.predicted) if t.predicted else "",) if predicted else ()
        table.add_row(str(t.number), state, t.source, *(_fmt(v) for v in vals), *extra, params, note)
    console.print(table)
    if result.pareto:
        console.print(f"Pareto front: trials {result.pareto}")
    line = trial_time_line(result.trial_time())
    if line:
        console.print(line)
    for line in model_lines(result.model or {}):
        console.print(line)
    error = result.model_error()
    if error:
        seed = f"; its seed {error['seed']:+.1%}" if error["seed"] is not None else ""
        console.print(
            f"  model error: median {error['median_abs']:.1%} over {error['trials']} measured trials (predicted / "
            f"measured - 1){seed}"
        )
    print_summary(result, console)


def trial_time_line(tt: dict[str, Any] | None) -> str:
    """`trial time (median of 8 launches): 173.1 s = start 65.5 s (imports 22.7 s, ...) + bench 84.7 s + stop 5.2 s`."""
    if not tt or tt.get("total_s") is None:
        return ""
    from servetune.launch import StartupPhases

    inside = StartupPhases(**(tt.get("startup_phases") or {})).summary()
    parts = [
        f"start {tt['startup_s']:g} s" + (f" ({inside})" if inside else "") if tt.get("startup_s") is not None else "",
        f"bench {tt['bench_s']:g} s" + _bench_split(tt) if tt.get("bench_s") is not None else "",
        f"stop {tt['stop_s']:g} s" if tt.get("stop_s") is not None else "",
    ]
    launches = f"{tt['trials']} launch{'es' if tt['trials'] != 1 else ''}"
    return f"trial time (median of {launches}): {tt['total_s']:g} s = " + " + ".join(p for p in parts if p)


def _bench_split(tt: dict[str, Any]) -> str:
    """` (screening 9.8 s, search 230 s)` where a capacity study's trials report the split."""
    parts = [f"{name} {tt[k]:g} s" for name, k in (("screening", "screening_s"), ("search", "search_s"),
             ("soak", "soak_s")) if tt.get(k)]  # fmt: skip
    return f" ({', '.join(parts)})" if parts else ""


def write_plots(study, result: TuneResult, out_dir: str | Path) -> list[Path]:
    """HTML (plotly, its JavaScript embedded: the file works offline) and PNG (matplotlib) plots plus
    summary.json; skips what is not installed (`servetune tune report` says so)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.json"]
    (out / "summary.json").write_text(json.dumps(redact(result.as_json()), indent=2, default=str))
    import optuna

    multi = len(result.objectives) > 1
    names = [o["name"] for o in result.objectives]
    plots: list[tuple[str, str, dict[str, Any]]] = []
    if multi:
        plots.append(("pareto_front", "plot_pareto_front", {"target_names": names}))
        for i, n in enumerate(names):
            plots.append((f"history_{n}", "plot_optimization_history", {"target": _target(i), "target_name": n}))
    else:
        plots.append(("history", "plot_optimization_history", {"target_name": names[0]}))
    plots.append(
        (
            "param_importances",
            "plot_param_importances",
            {"target": _target(0), "target_name": names[0]} if multi else {},
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fname, func, kwargs in plots:
            try:
                fig = getattr(optuna.visualization, func)(study, **kwargs)
                path = out / f"{fname}.html"
                fig.write_html(str(path), include_plotlyjs=True)  # embedded: GPU nodes are often offline
                written.append(path)
            except (ImportError, ValueError, RuntimeError, TypeError, ZeroDivisionError):
                pass
            try:
                import matplotlib

                matplotlib.use("Agg")
                import matplotlib.pyplot as plt

                ax = getattr(optuna.visualization.matplotlib, func)(study, **kwargs)
                fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
                path = out / f"{fname}.png"
                fig.savefig(path, dpi=110, bbox_inches="tight")
                plt.close(fig)
                written.append(path)
            except (ImportError, ValueError, RuntimeError, TypeError, ZeroDivisionError, AttributeError):
                pass
    return written


def _target(i: int):
    return lambda t: t.values[i] if t.values is not None else float("nan")
