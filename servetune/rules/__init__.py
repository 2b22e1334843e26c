"""Rules as data: loading (with file:line errors), condition evaluation, resolution, lint.

    rules = load_rules(["my-rules.yaml"], catalogs=[load_catalog("0.5.23")])
    config = resolve(facts, rules, catalog, layers=[LayerInput("pin", "cli", {"tp_size": 2})])

Rules sit above `schema` and `catalog` and never import hardware detection, launch, bench, the
runner, the tuner or the CLI (checked by import-linter: `lint-imports`).
"""

from servetune.errors import RequireViolation
from servetune.rules.engine import LayerInput, resolve
from servetune.rules.lint import LintReport, lint
from servetune.rules.loader import LoadedRule, RuleSet, builtin_rule_files, check_conflicts, load_rules

__all__ = [
    "LayerInput",
    "LintReport",
    "LoadedRule",
    "RequireViolation",
    "RuleSet",
    "builtin_rule_files",
    "check_conflicts",
    "lint",
    "load_rules",
    "resolve",
]
