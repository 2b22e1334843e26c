"""A capacity confirmation outlives one process: each measurement is written to the study as it ends, and a
run stopped part-way (Ctrl-C between or inside its measurements) goes on where it stopped when run again
with the same study. On the stand-in's landscape in simulated time (`testing.simulated.standin_runner`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from benchmarks.study_model import study_options
from servetune import interrupts
from servetune.bench.capacity import step_seed
from servetune.cli.tune import _interrupted
from servetune.testing.simulated import standin_runner
from servetune.tuner import Tuner
from servetune.tuner._confirm import _paired
from servetune.tuner.events import ConfirmResumed, ConfirmRound, ConfirmUnpaired
from servetune.tuner.report import print_summary


def _tuner(tmp_path: Path, on_event, *, files: bool = False) -> tuple[Tuner, object]:
    options = study_options(tmp_path, trials=3, confirm_rounds=2, confirm_soak_seconds=40, confirm_step_seconds=40,
                            study="resume")  # fmt: skip
    runner = standin_runner(input_tokens=128, output_tokens=128, images=1, files=files)
    return Tuner(options, runner=runner, on_event=on_event), runner


def _launches(runner, confirm_dir: Path) -> list[str]:
    """The confirmation's launches the runner served (a search's steps and a soak sit under one launch)."""
    out = []
    for call in runner.calls:
        parts = call.run_dir.relative_to(confirm_dir).parts if call.run_dir.is_relative_to(confirm_dir) else ()
        if parts and parts[0] not in out:
            out.append(parts[0])
    return out


def _stop_in_the_third_step(runner, holder: dict, where) -> list[Path]:
    """Make `runner` stop `holder["tuner"]` in the third rated step whose directory `where` accepts (the
    job's time limit inside a search); returns the list the steps' directories go into as they are served."""
    measure_fn, stepped = runner.measure_fn, []

    def measure(call):
        out = measure_fn(call)
        if call.workload.request_rate is not None and where(call.run_dir):  # not the launch's warm-up wave
            stepped.append(call.run_dir)
            if len(stepped) == 3:
                holder["tuner"].stop()
        return out

    runner.measure_fn = measure
    return stepped


def test_a_confirmation_stopped_part_way_goes_on_where_it_stopped(tmp_path, monkeypatch, capsys):
    rounds: list[ConfirmRound] = []
    holder: dict = {}

    def stop_at_the_third_measurement(event):
        if isinstance(event, ConfirmRound):
            rounds.append(event)
            if len(rounds) == 3:  # baseline r1, finalist r1 measured; stop before the baseline's round 2
                holder["tuner"].stop()

    tuner, runner = _tuner(tmp_path, stop_at_the_third_measurement)
    holder["tuner"] = tuner
    with pytest.raises(KeyboardInterrupt) as stopped:
        tuner.run()
    # the CLI's one line says what was kept: no trial was running (session 34's job limit read "the
    # running trial is queued again")
    monkeypatch.setattr(interrupts._STATE, "reported", False)  # `report_interrupt` marks it; restored after
    _interrupted(stopped.value, tuner.setup, False, confirming=tuner.confirming)
    line = capsys.readouterr().err
    assert "its unfinished confirmation keeps the 2 measurement(s) it took" in line and "queued again" not in line
    assert json.loads((tmp_path / "study" / "interrupted.json").read_text())["confirmation_measured"] == 2
    confirm_dir = tmp_path / "study" / "confirm"
    first = _launches(runner, confirm_dir)
    journal = tuner.study.user_attrs["confirm_journal"]
    assert sorted(journal["done"]) == sorted(
        f"{n}/1" for n in [journal["plan"]["baseline"], *journal["plan"]["finalists"][:1]]
    )
    assert journal["run_dir"] == str(confirm_dir) and "confirmation" not in tuner.study.user_attrs
    console = Console(record=True, width=400)
    print_summary(tuner.result(), console=console)  # what `tune report` says of it
    base, finalist = journal["plan"]["baseline"], journal["plan"]["finalists"][0]
    ratio = journal["done"][f"{finalist}/1"][0] / journal["done"][f"{base}/1"][0]
    said = console.export_text()
    assert "confirmation unfinished" in said and f"x{ratio:.3f} the baseline's round" in said
    assert "the study's own figures" in said  # the ratio above it is not the confirmation's
    assert f"trial {base}: {journal['done'][f'{base}/1'][0]:.4g};" in said and "soaks of 40 s pending" in said

    events: list = []
    again, runner2 = _tuner(tmp_path, events.append)
    result = again.run()
    (resumed,) = [e for e in events if isinstance(e, ConfirmResumed)]
    assert resumed.measured == 2 and resumed.run_dir == str(confirm_dir)
    second = _launches(runner2, confirm_dir)
    assert not any(name.startswith("r1-") for name in second)  # round 1 was kept, not measured again
    assert {n for n in second if n.startswith("r2-")} == {
        f"r2-trial-{n:04d}" for n in [journal["plan"]["baseline"], journal["plan"]["finalists"][0]]
    }
    record = again.study.user_attrs["confirmation"]
    base_r1 = journal["done"][f"{journal['plan']['baseline']}/1"][0]
    assert record["baseline_values"][0] == pytest.approx(base_r1) and len(record["baseline_values"]) == 2
    assert record["run_dir"] == str(confirm_dir) and record["soaks"]
    assert again.study.user_attrs["confirm_journal"] is None  # finished: a later confirmation starts afresh
    assert result.confirmation is not None and all(n.startswith(("r1-", "r2-", "soak-")) for n in first + second)


def test_a_confirmation_search_stopped_between_its_steps_keeps_the_steps_it_finished(tmp_path):
    """A job's time limit inside one round's search (here in its third step): the run again sets the partial
    directory aside and the search goes on from its third step, the first two kept as measured."""
    holder: dict = {}
    tuner, runner = _tuner(tmp_path, lambda event: None, files=True)
    holder["tuner"] = tuner
    confirm_dir = tmp_path / "study" / "confirm"
    stepped = _stop_in_the_third_step(
        runner, holder, lambda d: d.is_relative_to(confirm_dir) and d.parent.name == "steps"
    )
    with pytest.raises(KeyboardInterrupt):
        tuner.run()
    (launch,) = {p.parent.parent for p in stepped}
    assert not (stepped[2] / "verdict.json").exists()
    stepped = stepped[:2]  # finished
    assert not (launch / "capacity.json").exists()

    again, runner2 = _tuner(tmp_path, lambda event: None, files=True)
    again.run()
    aside = launch.with_name(f"{launch.name}.interrupted-1")
    assert aside.is_dir() and {p.name for p in stepped} <= {p.name for p in (aside / "steps").iterdir()}
    served = [c.run_dir.name for c in runner2.calls if c.run_dir.parent == launch / "steps" and c.workload.request_rate]
    assert served and not set(served) & {p.name for p in stepped}  # the two finished steps were not served again
    steps = json.loads((launch / "capacity.json").read_text())["steps"]
    kept = [s for s in steps if s.get("resumed_from")]
    assert [Path(s["resumed_from"]).name for s in kept] == [p.name for p in stepped]
    assert all(Path(s["resumed_from"]).parent.parent == aside for s in kept)
    assert again.study.user_attrs["confirmation"]["rounds"] == 2


def test_the_report_of_an_unfinished_confirmation_names_the_soaks_still_to_run():
    """The H200 study's journal (session 15: two rounds of the baseline, trial 2, and the seed, trial 9):
    both soaks pending; after the seed's soak only the baseline's; after both none."""
    from servetune.tuner.report import _unfinished

    plan = {"objective": "capacity", "baseline": 2, "finalists": [9], "rounds": 2, "soak_s": 300.0}
    done: dict = {"2/1": [16.82, None], "9/1": [22.88, None], "2/2": [17.83, None], "9/2": [22.13, None]}
    said = _unfinished({"plan": plan, "done": done})
    assert "trial 9: 22.88, 22.13 (x1.360, x1.241 the baseline's round)" in said
    assert "; soaks of 300 s pending" in said
    done["soak/9"] = {"trial": 9, "rate": 21.44, "state": "met", "seconds": 300.0}
    said = _unfinished({"plan": plan, "done": done})
    assert "soak of trial 9 at 21.44 req/s: met; the baseline's soak of 300 s pending" in said
    done["soak/2"] = {"trial": 2, "rate": 21.44, "state": "missed", "seconds": 300.0}
    assert "pending" not in _unfinished({"plan": plan, "done": done})
    # session 34's journal: the baseline's round 1 measured on a ninth H100, the winner's not yet
    journal = {"plan": plan, "done": {"2/1": [13.98, None]}, "machines": {"2/1": "GPU-5e356108-3951-3ef1"}}
    assert "trial 2: 13.98 on GPU-5e356108…; soaks of 300 s pending" in _unfinished(journal)


def test_a_confirmation_resumed_on_another_machine_searches_the_winner_there_before_it_soaks(tmp_path):
    """The H200's case (session 16): rounds measured on one lent machine, the soaks resumed on another where
    the winner's median rate was 25% too high for a soak to hold. Each round is stored with the machine it
    ran on; resumed on another machine, the winner's soak launch first searches its capacity there (steps
    in its own directory, from the rounds' median, on a new sequence) and soaks at what it found; the
    baseline then soaks at the rate the winner held."""
    holder: dict = {}
    confirm_dir = tmp_path / "study" / "confirm"
    tuner, runner = _tuner(tmp_path, lambda event: None)
    runner.machine_id = "GPU-a"
    measure_fn = runner.measure_fn

    def stop_at_the_first_soak(call):
        if call.run_dir.is_relative_to(confirm_dir) and call.run_dir.relative_to(confirm_dir).parts[0].startswith(
            "soak-"
        ):
            holder["tuner"].stop()
        return measure_fn(call)

    runner.measure_fn = stop_at_the_first_soak
    holder["tuner"] = tuner
    with pytest.raises(KeyboardInterrupt):
        tuner.run()
    journal = tuner.study.user_attrs["confirm_journal"]
    rounds = [k for k in journal["done"] if not k.startswith("soak/")]
    assert len(rounds) == 4 and journal["machines"] == {k: "GPU-a" for k in rounds}

    again, runner2 = _tuner(tmp_path, lambda event: None)
    runner2.machine_id = "GPU-b"
    again.run()
    record = again.study.user_attrs["confirmation"]
    winner = record["chosen_trial"]
    if winner == record["baseline_trial"]:
        pytest.skip("the stand-in's confirmation kept the baseline: nothing to soak but it")
    values = next(f["values"] for f in record["finalists"] if f["trial"] == winner)
    soak_dir = confirm_dir / f"soak-trial-{winner:04d}"
    searched = [c for c in runner2.calls if c.run_dir.parent == soak_dir / "steps" and c.workload.request_rate]
    assert searched and searched[0].workload.request_rate == pytest.approx(
        sorted(values)[0] / 2 + sorted(values)[1] / 2
    )
    assert searched[0].workload.seed not in {step_seed(k, 1) for k in (1, 2)}  # not a round's sequence
    (win, base) = record["soaks"]
    assert win["searched"] is not None and win["trial"] == winner and "certified" in win
    soaked = [c for c in runner2.calls if c.run_dir.parent == soak_dir / "soaks"]
    assert soaked and soaked[0].workload.request_rate == pytest.approx(win["searched"])
    assert base["rate"] == pytest.approx(win["rate"]) and base["seed"] == win["seed"]  # the same arrivals
    assert again.study.user_attrs["confirm_journal"] is None
    console = Console(record=True, width=400)
    print_summary(again.result(), console=console)
    assert f"soak of trial {winner} (its rounds ran on another machine; searched first on the soak's: " in (
        console.export_text()
    )


def test_the_winner_soaks_at_the_median_of_its_rounds_on_the_machine_it_soaks_on():
    """`_soak_rate`: rounds on this machine only; a machine with none of them searches first, from the
    median of all; a runner that cannot tell its machine (None, as without NVML) uses every round."""
    from servetune.tuner._confirm import _soak_rate

    journal = {"machines": {"9/1": "GPU-a", "9/2": "GPU-b", "9/3": "GPU-b"}}
    values = [22.88, 19.0, 19.4]
    assert _soak_rate(values, 9, journal, "GPU-b") == (pytest.approx(19.2), False)
    assert _soak_rate(values, 9, journal, "GPU-a") == (22.88, False)
    assert _soak_rate(values, 9, journal, "GPU-c") == (19.4, True)
    assert _soak_rate(values, 9, {}, "GPU-c") == (19.4, True)  # rounds stored before machines were
    assert _soak_rate(values, 9, journal, None) == (19.4, False)
    assert _soak_rate([None, None], 9, journal, "GPU-a") == (None, False)


def test_a_round_cut_between_its_pair_is_measured_again_on_the_machine_its_partner_runs_on(tmp_path):
    """A window that ends after the baseline's round 2 and before the finalist's: resumed on another lent
    machine, the baseline's round 2 is measured again there (the first kept under `elsewhere`, its directory
    as `.elsewhere-1`), so each round's ratio compares two searches on one machine; round 1 (both on the
    first machine) is kept. That re-measurement, stopped in its third step and resumed on the same machine,
    keeps its two finished steps, and the move is not made twice."""
    rounds: list[ConfirmRound] = []
    holder: dict = {}

    def stop_before_the_finalists_round_2(event):
        if isinstance(event, ConfirmRound):
            rounds.append(event)
            if len(rounds) == 4:
                holder["tuner"].stop()

    tuner, runner = _tuner(tmp_path, stop_before_the_finalists_round_2, files=True)
    runner.machine_id = "GPU-a"
    holder["tuner"] = tuner
    with pytest.raises(KeyboardInterrupt):
        tuner.run()
    journal = tuner.study.user_attrs["confirm_journal"]
    base, finalist = journal["plan"]["baseline"], journal["plan"]["finalists"][0]
    assert sorted(journal["done"]) == sorted([f"{base}/1", f"{finalist}/1", f"{base}/2"])
    first_r2 = journal["done"][f"{base}/2"]
    confirm_dir = tmp_path / "study" / "confirm"
    launch = confirm_dir / f"r2-trial-{base:04d}"

    events: list = []
    again, runner2 = _tuner(tmp_path, events.append, files=True)
    runner2.machine_id = "GPU-b"
    holder["tuner"] = again
    stepped = _stop_in_the_third_step(runner2, holder, lambda d: d.parent == launch / "steps")
    with pytest.raises(KeyboardInterrupt):
        again.run()
    (unpaired,) = [e for e in events if isinstance(e, ConfirmUnpaired)]
    assert (unpaired.trial, unpaired.round, unpaired.there, unpaired.here) == (base, 2, "GPU-a", "GPU-b")
    stored = again.study.user_attrs["confirm_journal"]
    assert f"{base}/2" not in stored["done"] and len(stored["elsewhere"][f"{base}/2"]) == 1  # stored at the move

    events.clear()
    third, runner3 = _tuner(tmp_path, events.append, files=True)
    runner3.machine_id = "GPU-b"
    third.run()
    assert not [e for e in events if isinstance(e, ConfirmUnpaired)]
    served = [c.run_dir.name for c in runner3.calls if c.run_dir.parent == launch / "steps" and c.workload.request_rate]
    assert served and not set(served) & {d.name for d in stepped[:2]}  # its two finished steps kept, not served again
    assert not any(c.run_dir.is_relative_to(confirm_dir / f"r1-trial-{base:04d}") for c in runner3.calls)
    done = third.study.user_attrs["confirmations"][-1]
    assert done["baseline_values"][0] == pytest.approx(journal["done"][f"{base}/1"][0])
    (kept,) = done["elsewhere"][f"{base}/2"]
    assert kept["result"] == first_r2 and kept["machine"] == "GPU-a"
    assert Path(kept["run_dir"]).name == f"r2-trial-{base:04d}.elsewhere-1"  # a finished search, not a cut one
    assert (Path(kept["run_dir"]) / "capacity.json").is_file()
    assert launch.with_name(f"{launch.name}.interrupted-1").is_dir()  # GPU-b's stopped one, its steps kept
    assert done["machines"][f"{base}/2"] == done["machines"][f"{finalist}/2"] == "GPU-b"
    assert done["machines"][f"{base}/1"] == done["machines"][f"{finalist}/1"] == "GPU-a"


def test_the_baselines_stored_round_pairs_by_machine():
    """`_paired`: the baseline's round from the machine its partner's ran on, else from this one; a side
    that cannot tell its machine pairs with any."""
    journal = {
        "done": {"2/1": [16.8, None], "9/1": [22.9, None], "5/1": [20.1, None]},
        "machines": {"2/1": "GPU-b", "9/1": "GPU-a", "5/1": "GPU-b"},
        "elsewhere": {"2/1": [{"result": [13.4, None], "machine": "GPU-a", "run_dir": "x"}]},
    }
    assert _paired(journal, "2/1", "9/1", "GPU-c") == [13.4, None]  # trial 9's round ran on GPU-a
    assert _paired(journal, "2/1", "5/1", "GPU-a") == [16.8, None]  # trial 5's on GPU-b
    assert _paired(journal, "2/1", "7/1", "GPU-a") == [13.4, None]  # trial 7's runs here
    assert _paired(journal, "2/1", "7/1", "GPU-c") is None  # measured nowhere near: measure it here
    assert _paired(journal, "2/1", "7/1", None) == [16.8, None]
    assert _paired(journal, "2/2", "9/2", "GPU-a") is None
