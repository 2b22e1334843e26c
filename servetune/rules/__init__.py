"""Rules as data: loading (with file:line errors), condition evaluation, resolution, lint.

from servetune.rules.loader import load_rules
from servetune.rules.engine import LayerInput, resolve
"""
