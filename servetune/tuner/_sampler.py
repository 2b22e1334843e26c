"""TPE that learns from failed launches.

Optuna's samplers skip FAIL trials, so a region that runs out of memory is sampled again and
again. Here the sampler sees each trial that failed *because of its config* (OOM, crash,
start-up timeout, bench error, broken `require` rule) as an infeasible point: a PRUNED copy
with no value and a violated constraint, which TPE puts in its "bad" group. The stored trial
stays FAIL with its failure record; only the sampler's view changes, and no score is made up.
"""

from __future__ import annotations

import copy
from typing import Any

import optuna
from optuna.samplers import TPESampler
from optuna.trial import TrialState

from servetune.tuner._storage import is_config_failure

LAUNCH_FAILED = "constraints:launch_failed"


class _FailuresAsInfeasible:
    """A study seen through: config-failed trials appear as infeasible PRUNED trials."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states=None, use_cache: bool = False):
        trials = [_as_infeasible(t) for t in self._study._get_trials(deepcopy=False, states=None, use_cache=use_cache)]
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(self, deepcopy: bool = True, states=None):
        return self._get_trials(deepcopy=deepcopy, states=states, use_cache=False)


def _as_infeasible(t):
    if t.state != TrialState.FAIL or not t.params or not is_config_failure(t):
        return t
    view = copy.copy(t)
    view.state = TrialState.PRUNED
    view.intermediate_values = {}
    if hasattr(optuna.trial.FrozenTrial, "constraints"):
        view._system_attrs = {**t.system_attrs, LAUNCH_FAILED: 1.0}
    else:  # optuna < 5 reads one list
        view._system_attrs = {**t.system_attrs, "constraints": [1.0]}
    return view


class FailureAwareTPESampler(TPESampler):
    """`TPESampler` whose model counts config failures as infeasible (see the module doc)."""

    def infer_relative_search_space(self, study, trial):
        return super().infer_relative_search_space(_FailuresAsInfeasible(study), trial)

    def sample_relative(self, study, trial, search_space):
        return super().sample_relative(_FailuresAsInfeasible(study), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return super().sample_independent(_FailuresAsInfeasible(study), trial, param_name, param_distribution)
