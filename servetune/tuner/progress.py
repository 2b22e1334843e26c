"""`servetune tune`'s progress on stderr: a rich bar (launches done, best so far, ETA) and one line
per finished trial, drawn from the study's events (`servetune.tuner.events`)."""

from __future__ import annotations

from typing import Any

from servetune.tuner._storage import redact_url as _redact


class TuneProgress:
    """A rich progress bar on stderr: trials done, best so far, ETA; one line per finished trial."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> TuneProgress:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]tune[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def event(self, event: Any) -> None:
        """Show one `servetune.tuner.events` event."""
        from servetune.tuner import events as ev

        if self._progress is None:
            return
        p = self._progress
        if isinstance(event, ev.StudyStarted):
            done = min(event.done, event.trials)
            self._task = p.add_task("tune", total=event.trials, completed=done, best="")
            p.console.print(
                f"study [bold]{event.study}[/] in {_redact(event.storage)}; {len(event.space)} dimensions, "
                f"{event.slots} parallel slot(s); {event.measure or f'{event.requests} requests per trial'}; "
                f"{event.done} trial(s) already done"
            )
            if event.dropped:
                p.console.print("left out of the space: " + ", ".join(f"{k} ({v})" for k, v in event.dropped.items()))
        elif isinstance(event, ev.LostTrials):
            p.console.print(f"[yellow]marked failed (worker gone), retry queued: trials {list(event.trials)}[/]")
        elif isinstance(event, ev.VoidRetries):
            p.console.print(
                f"[yellow]queued again: trials {list(event.trials)} (their retry launched another config, "
                "so they were never measured)[/]"
            )
        elif isinstance(event, ev.TrialFinished) and self._task is not None:
            self._trial_line(p, event)
        elif isinstance(event, ev.Converged):
            p.console.print(
                f"[yellow]stopping after {event.done} launches: the sampler proposed {event.reproposals} "
                "measured configs in a row (converged, or the space is used up)[/]"
            )
        elif isinstance(event, ev.BudgetSpent):
            spent = f"{event.elapsed_s / 60:.1f} of {event.budget_s / 60:.1f} min spent"
            p.console.print(
                f"[yellow]stopping after {event.done} launches: {spent}, and the next trial (~{event.trial_s:.0f} s) "
                f"plus the confirmation (~{event.confirmation_s:.0f} s) would not fit --budget[/]"
            )
        elif isinstance(event, ev.ModelFitted):
            for line in model_lines(event.record):
                p.console.print(line)
        elif isinstance(event, ev.ConfirmResumed):
            p.console.print(
                f"resuming the confirmation an earlier run left unfinished: {event.measured} measurement(s) "
                f"kept ({event.run_dir})"
            )
        elif isinstance(event, ev.ConfirmRound):
            p.console.print(f"re-measuring trial {event.trial} (round {event.round}/{event.rounds})")
        elif isinstance(event, ev.ConfirmUnpaired):
            p.console.print(
                f"[yellow]trial {event.trial}'s round {event.round} ran on another machine ({event.there}); "
                f"measuring it again on this one ({event.here}) so the round's pair shares a machine[/]"
            )
        elif isinstance(event, ev.Confirmed):
            for f in event.finalists:
                if f["median"] is not None:
                    p.console.print(
                        f"trial {f['trial']}: {f['median']:.3f}x baseline (min {f['min']:.3f}, max {f['max']:.3f}, "
                        f"{len(f['ratios'])} rounds)"
                    )
            if event.note:
                p.console.print(f"[yellow]{event.note}[/]")
        elif isinstance(event, ev.ConfirmSkipped):
            p.console.print(f"no re-measurement: {event.why}")

    def _trial_line(self, p: Any, event: Any) -> None:
        best = event.best
        best_text = "" if not best else f"best {best.values[0]:.4g} (trial {best.number})"
        if event.done is not None:
            p.update(self._task, completed=min(event.done, event.total if event.total is not None else event.done))
        p.update(self._task, best=best_text)
        if event.state == "FAIL":
            f = event.failure or {}
            line = (
                f"[red]FAIL[/] {f.get('class')}: "
                f"{str(f.get('message', '')).splitlines()[0][:120] if f.get('message') else ''}"
            )
        elif event.state == "COMPLETE":
            vals = ", ".join(f"{v:.4g}" for v in event.values or ())
            line = f"[green]ok[/] {vals}" + ("" if event.feasible else " [yellow](violates SLO)[/]")
            if event.duplicate_of is not None:
                line += f" (same config as trial {event.duplicate_of}, not relaunched)"
        else:
            line = f"[yellow]{event.state.lower()}[/]"
        p.console.print(f"trial {event.number:>3} {event.source[:8]:<8} {line}")


LEVEL_OFF = 0.25
"""A model that reads its own baseline's measured capacity further off than this share says so: something it
does not model bounds the server. Over the 12 recorded pairs of real SGLang it read its baseline -8.5% to +23.4%
(`benchmarks/model_pairs.py`). On the stand-in serving `single-image-stream` at 0.5.17 with SGLang's defaults,
requests waited upstream of the scheduler at 66.8 req/s (its queue empty, 1-10 running, TTFT from the arrival up
to 2.6 s): the model read the baseline +64% (105.0 against 63.84 req/s) and its seed +79%."""


def _level_lines(record: dict[str, Any]) -> list[str]:
    """What the model's reading of its own baseline says. Fitted on the baseline alone, one more than `LEVEL_OFF`
    off means something it does not model bounds the server. After a refit that judgement stays with the fit
    alone (`refit.baseline_alone`); the pooled fit reading the baseline that far off means one set of costs does
    not fit both searches (on a lent H100 the pooled fit read SGLang's defaults +30% and the seed +4%, alone +7%
    and -11%), which is said as that."""
    measured, refit = record.get("baseline_measured"), record.get("refit") or {}
    if not measured:
        return []
    refitted = bool(refit.get("alone"))  # `baseline_predicted` is then the pooled fit's reading
    alone = refit.get("baseline_alone") if refitted else record.get("baseline_predicted")
    pooled = record.get("baseline_predicted") if refitted else None
    lines = []
    if alone and abs(alone / measured - 1.0) > LEVEL_OFF:
        lines.append(
            f"  it reads its own baseline {alone / measured - 1.0:+.0%}: something it does not model bounds this "
            "server (a host-side ceiling such as image preprocessing, or the client), so its capacities here are "
            "uncertain; every config it seeds is measured before anything is adopted"
        )
    if pooled and abs(pooled / measured - 1.0) > LEVEL_OFF:
        what = "seed" if refit.get("of") == "model" else "probe"
        lines.append(
            f"  pooled with the {what}'s search it reads the baseline {pooled / measured - 1.0:+.0%}"
            + (f" (alone {alone / measured - 1.0:+.0%})" if alone else "")
            + ": one set of costs does not fit both searches, so the refit's figures are only what to measure next"
        )
    return lines


def _rate(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


def _seed_line(which: str, seed: dict[str, Any]) -> str:
    values = ", ".join(f"{k}={v}" for k, v in seed["values"].items())
    return f"  {which}: {values}, predicted {seed['predicted']:.4g} req/s"


def model_lines(record: dict[str, Any]) -> list[str]:
    """The server model's record as a study prints it: the fit, what it pruned and why, its seed."""
    if not record:
        return []
    m = record.get("model")
    if not m:
        return [f"server model: {record.get('note', 'none')}"]
    graph = f"{m['eager_ms']:.2f} ms past the {m['graph_bs']}-wide graph" if m.get("eager_ms") else "graph cost unseen"
    on = (
        f"trials {record.get('fitted_on')} and {record['refit']['trial']}"
        if m.get("pooled") and record.get("refit")
        else f"trial {record.get('fitted_on')}"
    )
    fit = f"{on}, {m['steps']} steps, {m['requests']} requests, R2 {m['r2']:.2f}"
    if m.get("left_out"):  # steps the TPOT regression left out (servermodel.OUTLIER_RMS)
        rates = ", ".join(f"{r:.4g}" for r in m["left_out"])
        steps = "steps" if len(m["left_out"]) > 1 else "step"
        fit += f"; TPOT fitted without the {steps} at {rates} req/s (far off the fit)"
    usage = m["token_usage_max"] if m.get("token_usage_max") is not None else "?"
    per_batch = m.get("prefill_batch_mean") or 1.0
    batching = f", {per_batch:.2f} requests a prefill batch" if per_batch > 1.0 else ""
    lines = [
        f"server model ({fit}): {m['base_ms']:.2f} ms per token + {m['per_running_ms']:.3f} ms per running request, "
        f"{graph}, prefill stall {m['prefill_ms']:.2f} ms ({m['stall']}{batching}); "
        f"ran at most {m['running_max']} at once, "
        f"KV usage up to {usage}; predicts the baseline at {_rate(record.get('baseline_predicted'))} req/s "
        f"(measured {_rate(record.get('baseline_measured'))})"
    ]
    clock = record.get("engine")
    if clock:
        lines.append(
            f"  SGLang's own clock on trial {record.get('fitted_on')}: decode step {clock['decode_step_ms']:.2f} ms "
            f"{clock['per_running_ms']:+.3f} ms per running request, a prefilled request "
            f"{clock['prefill_ms_per_request']:.1f} ms at {clock['requests_per_batch']:.2f} a batch "
            f"({clock['intervals']} intervals, R2 {clock['r2']:.2f})"
        )
    if record.get("stalls"):
        from servetune.bench.stalls import Stalls

        lines.append(f"  on trial {record.get('fitted_on')}, {Stalls.model_validate(record['stalls']).describe()}")
    lines.extend(_level_lines(record))
    for e in record.get("evidence") or []:
        lines.append(f"  {e['field']}: {e['action']}" + (f" to {e['to']:g}" if "to" in e else "") + f" ({e['why']})")
    probe, refit, seed = record.get("probe"), record.get("refit"), record.get("seed")
    if probe:
        values = ", ".join(f"{k}={v}" for k, v in probe["values"].items())
        lines.append(f"  {record.get('note') or 'no seed'}; probe: {values} ({probe['why']})")
    if refit:
        measured = f"measured {refit['measured']:.4g}" if refit.get("measured") is not None else "no capacity"
        what = "seed" if refit.get("of") == "model" else "probe"
        head = f"  refit on the baseline and {what} trial {refit['trial']} ({measured}"
        lines.append(head + (f", predicted {refit['predicted']:.4g} req/s)" if "predicted" in refit else ")"))
        if refit.get("note"):
            lines.append(f"  {refit['note']}")
        if refit.get("seed"):  # a refit after the seed: its own seed, the first one kept below
            lines.append(_seed_line("the refit's seed", refit["seed"]))
    if seed:
        which = "the refit's seed" if refit and refit.get("of") != "model" else "first sampled trial"
        lines.append(_seed_line(which, seed))
    elif record.get("note") and not probe:
        lines.append(f"  {record['note']}")
    return lines
