"""All-numeric choice lists are searched through an ordered int index; users only see the values.

TPE's categorical kernel knows no neighbours, so `{choice: [2048, 4096, 8192]}` is sampled as
`suggest_int(name, 0, 2)` over the sorted values. These tests check the index <-> value mapping
in the params a trial returns and stores, the baseline enqueue, the `--json` result, the report
and the preset (the whole tuner loop runs in process, with a `FakeRunner` as the launch + benchmark).
"""

from __future__ import annotations

import pytest

from servetune.schema.space import ChoiceDistribution
from servetune.tuner._params import decode_params, encode_params, ordinal_values, to_optuna
from servetune.tuner.space import build_space
from tests.tuner.test_space import CATALOG

SPACE = """\
tune:
  chunked_prefill_size: {choice: [8192, 2048, 16384, 4096]}
  mem_fraction_static: {choice: [0.85, 0.8]}
  max_running_requests: {int: [8, 128], log: true}
  schedule_policy: {choice: [fcfs, lpm]}
"""


def _choice(*values):
    return ChoiceDistribution.model_validate({"choice": list(values)})


def test_only_all_numeric_choices_are_ordinal():
    assert ordinal_values(_choice(8192, 2048, 4096)) == (2048, 4096, 8192)
    assert ordinal_values(_choice(0.9, 0.8, 1)) == (0.8, 0.9, 1)
    for categorical in (_choice("fcfs", "lpm"), _choice(True, False), _choice(None, 2048), _choice(1, "a"), _choice(7)):
        assert ordinal_values(categorical) is None


def test_index_and_value_map_both_ways_through_an_optuna_trial():
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space = build_space(
        catalog=CATALOG,
        space_sets=[
            "chunked_prefill_size=choice(8192,2048,16384,4096)",
            "schedule_policy=choice(fcfs,lpm)",
            "SGLANG_VLM_CACHE_SIZE_MB=choice(null,100)",
        ],
    )
    assert to_optuna(space.params["chunked_prefill_size"].distribution) == IntDistribution(0, 3)
    assert isinstance(to_optuna(space.params["schedule_policy"].distribution), CategoricalDistribution)
    values = {"chunked_prefill_size": 4096, "schedule_policy": "lpm", "SGLANG_VLM_CACHE_SIZE_MB": None}
    assert encode_params(space, values) == {
        "chunked_prefill_size": 1,
        "schedule_policy": "lpm",
        "SGLANG_VLM_CACHE_SIZE_MB": None,
    }
    with pytest.raises(ValueError, match="not among the choices"):
        encode_params(space, {"chunked_prefill_size": 1024})
    with pytest.raises(ValueError):
        encode_params(space, {"chunked_prefill_size": 4096.0})  # a float is not the int choice

    from servetune.tuner._params import suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial(encode_params(space, values))
    trial = study.ask()
    assert suggest(trial, space) == values  # real values for the resolved config
    assert trial.params["chunked_prefill_size"] == 1  # Optuna stores the index
    study.tell(trial, 1.0)
    frozen = study.trials[0]
    assert decode_params(frozen.params, frozen.distributions, space.as_dict()) == values
    # a study made before the ordinal encoding stored the value as a category: kept as is
    assert decode_params(
        {"chunked_prefill_size": 4096}, {"chunked_prefill_size": CategoricalDistribution([8192, 4096])}, space.as_dict()
    ) == {"chunked_prefill_size": 4096}
    for _ in range(20):
        sampled = suggest(study.ask(), space)
        assert sampled["chunked_prefill_size"] in (2048, 4096, 8192, 16384)


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A 6-trial study through the real loop; the fake runner scores a config by its chunked prefill size."""
    import optuna

    from servetune.testing import FakeRunner
    from servetune.tuner import TuneOptions, Tuner

    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "space.yaml").write_text(SPACE)

    def fake_measure(call):
        req = call.values
        value = float(req.get("chunked_prefill_size") or 1000) / 100 + float(req.get("mem_fraction_static") or 0.5)
        return {"comparable_request_throughput": value, "request_throughput": value, "completed": 8}

    tuner = Tuner(
        TuneOptions(
            model="qwen3-8b",
            gpu="h200",
            workload="text-chat",
            space_file=str(tmp_path / "space.yaml"),
            trials=6,
            seed=3,
            confirm_rounds=0,
            study="ordinal",
            run_dir=tmp_path / "run",
        ),
        runner=FakeRunner(fake_measure),
    )
    result = tuner.run()
    study = optuna.load_study(study_name="ordinal", storage=tuner.storage_url)
    return tuner, result, study


def test_trials_baselines_json_and_storage_show_real_values(tuned):
    from optuna.distributions import IntDistribution

    tuner, result, study = tuned
    choices = {"chunked_prefill_size": {2048, 4096, 8192, 16384}, "mem_fraction_static": {0.8, 0.85}}
    data = result.as_json()
    for t, frozen in zip(data["trials"], study.trials):
        assert t["number"] == frozen.number
        for name, allowed in choices.items():
            if name in t["params"]:
                assert t["params"][name] in allowed, (name, t["params"])
                assert isinstance(frozen.distributions[name], IntDistribution)
                assert frozen.params[name] in range(len(allowed))  # stored as the index
        if t["source"] == "sampler":
            assert frozen.user_attrs["params"] == t["params"]
            assert frozen.user_attrs["layer"] == {k: v for k, v in t["params"].items() if v is not None}
    # the baselines were enqueued by index; what the rules chose that is not a choice is `fixed`
    for source in ("rules", "defaults"):
        base = next(t for t in data["trials"] if t["source"] == source)
        decided = {**tuner.resolve({}, use_rules=source == "rules").requested()}
        for name in choices:
            if name in base["params"]:
                assert base["params"][name] == decided.get(name)
            else:
                assert base["fixed"][name] == decided.get(name)
    for key in ("best", "baseline"):
        for name, allowed in choices.items():
            if name in data[key]["params"]:
                assert data[key]["params"][name] in allowed
    best = data["best"]
    assert best["set"] == {k: v for k, v in best["params"].items() if v is not None} or best["source"] != "sampler"


def test_report_and_preset_show_real_values(tuned, capsys, monkeypatch):
    import yaml

    from servetune.tuner import load_result
    from servetune.tuner.output import build_preset
    from servetune.tuner.report import print_report

    tuner, _, study = tuned
    result = load_result(study, tuner.storage_url)  # as `servetune tune report` reads it back
    sampled = [t for t in result.trials if t.source == "sampler" and t.state == "COMPLETE"]
    assert sampled
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    print_report(result)
    out = capsys.readouterr().out
    for t in sampled:
        assert f"chunked_prefill_size={t.params['chunked_prefill_size']}" in out
        assert t.params["chunked_prefill_size"] in (2048, 4096, 8192, 16384)
    best = result.best
    preset = build_preset(result)
    assert preset["set"] == best.layer
    for name, value in preset["set"].items():
        assert best.params[name] == value
    if best.source == "sampler":
        assert preset["set"]["chunked_prefill_size"] in (2048, 4096, 8192, 16384)
    # tune: keeps the user's list as written
    assert preset["tune"]["chunked_prefill_size"] == {"choice": [8192, 2048, 16384, 4096]}
    yaml.safe_dump(preset)


def test_a_study_stored_with_categorical_choices_does_not_resume(tuned, tmp_path):
    """Studies made before the ordinal encoding stored numeric choices as categories; resuming one
    is refused with a clear message instead of Optuna's distribution-kind error."""
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from servetune.errors import TuningError
    from servetune.tuner import TuneOptions, Tuner

    tuner, _, study = tuned
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = optuna.create_study(study_name="old", storage=url, direction="maximize")
    for key, value in study.user_attrs.items():
        old.set_user_attr(key, value)
    old.add_trial(
        optuna.trial.create_trial(
            params={"chunked_prefill_size": 4096, "max_running_requests": 32},
            distributions={
                "chunked_prefill_size": CategoricalDistribution([8192, 2048, 16384, 4096]),
                "max_running_requests": IntDistribution(8, 128, log=True),
            },
            value=1.0,
            user_attrs={"source": "sampler"},
        )
    )
    again = Tuner(
        TuneOptions(
            model="qwen3-8b",
            gpu="h200",
            workload="text-chat",
            space_file=tuner.o.space_file,
            trials=8,
            seed=3,
            confirm_rounds=0,
            study="old",
            storage=url,
            run_dir=tmp_path / "old",
        )
    )
    with pytest.raises(TuningError, match="stored as categories"):
        again.prepare()
    # its report still reads: a category is already the value
    from servetune.tuner import load_result

    trials = load_result(optuna.load_study(study_name="old", storage=url), url).trials
    assert trials[0].params == {"chunked_prefill_size": 4096, "max_running_requests": 32}
