"""Evaluating condition trees over facts and resolved values (two- or three-valued)."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from servetune.schema.decision import ConditionResult
from servetune.schema.facts import FACT_PATHS
from servetune.schema.rule import AllOf, AnyOf, Atom, Condition, Not, Ref
from servetune.versions import version_key


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNSET = _Marker("unset")
"""A field or env var that no layer decided."""
UNKNOWN = _Marker("unknown")
"""A value lint cannot know (a field a higher layer might set)."""

Lookup = Callable[[str], Any]


def _ordered(path: str, a: Any, b: Any) -> tuple[Any, Any] | None:
    if FACT_PATHS.get(path) == "version" or (isinstance(a, str) and isinstance(b, str) and path.startswith("sglang.")):
        try:
            return version_key(str(a)), version_key(str(b))
        except ValueError:
            return None
    if isinstance(a, bool) or isinstance(b, bool):
        return None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a, b
    return None


def _eq(path: str, a: Any, b: Any) -> bool:
    if FACT_PATHS.get(path) == "version":
        try:
            return version_key(str(a)) == version_key(str(b))
        except ValueError:
            return False
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return a == b


def eval_atom(atom: Atom, lookup: Lookup) -> bool | None:
    """Evaluate one atom; None when a value is UNKNOWN."""
    actual = lookup(atom.path)
    operand = atom.value
    if isinstance(operand, Ref):
        operand = lookup(operand.ref)
        if operand is UNKNOWN:
            return None
    if actual is UNKNOWN:
        return None
    if atom.op == "is_set":
        return (actual is not UNSET and actual is not None) == bool(operand)
    if actual is UNSET or actual is None or operand is UNSET:
        return atom.op in ("ne", "not_in")
    if atom.op == "eq":
        return _eq(atom.path, actual, operand)
    if atom.op == "ne":
        return not _eq(atom.path, actual, operand)
    if atom.op == "in":
        return any(_eq(atom.path, actual, v) for v in operand)
    if atom.op == "not_in":
        return not any(_eq(atom.path, actual, v) for v in operand)
    if atom.op == "between":
        low, high = _ordered(atom.path, actual, operand[0]), _ordered(atom.path, actual, operand[1])
        return bool(low and high and low[0] >= low[1] and high[0] <= high[1])
    pair = _ordered(atom.path, actual, operand)
    if pair is None:
        return False
    a, b = pair
    return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[atom.op]


def evaluate(cond: Condition, lookup: Lookup, trace: list[ConditionResult] | None = None) -> bool | None:
    """Evaluate a condition tree (three-valued: None = unknown), recording atoms in `trace`."""
    if isinstance(cond, Atom):
        result = eval_atom(cond, lookup)
        if trace is not None:
            actual = lookup(cond.path)
            text = cond.describe()
            if isinstance(cond.value, Ref):
                ref_value = lookup(cond.value.ref)
                text += f" ({'unset' if ref_value is UNSET or ref_value is UNKNOWN else ref_value})"
            trace.append(
                ConditionResult(
                    condition=text,
                    path=cond.path,
                    actual=None if actual is UNSET or actual is UNKNOWN else actual,
                    ok=bool(result),
                )
            )
        return result
    if isinstance(cond, AllOf):
        results = [evaluate(c, lookup, trace) for c in cond.all]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if isinstance(cond, AnyOf):
        results = [evaluate(c, lookup, trace) for c in cond.any]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if isinstance(cond, Not):
        inner = evaluate(cond.not_, lookup, None)
        if trace is not None:
            trace.append(ConditionResult(condition=f"not ({_describe(cond.not_)})", ok=inner is False))
        return None if inner is None else not inner
    raise TypeError(cond)


def _describe(cond: Condition) -> str:
    """The condition as one expression; a group inside another is parenthesized (`a and (b or c)`),
    since `and` binds tighter than `or` and the text must mean what the rule does."""
    if isinstance(cond, Atom):
        return cond.describe()
    if isinstance(cond, AllOf):
        return " and ".join(_operand(c) for c in cond.all) or "true"
    if isinstance(cond, AnyOf):
        return " or ".join(_operand(c) for c in cond.any)
    return f"not ({_describe(cond.not_)})"


def _operand(cond: Condition) -> str:
    text = _describe(cond)
    groups = (isinstance(cond, AllOf) and len(cond.all) > 1) or (isinstance(cond, AnyOf) and len(cond.any) > 1)
    return f"({text})" if groups else text


def top_level_atoms(cond: Condition) -> list[Atom]:
    """The atoms that must all hold (the top-level conjunction), for static overlap checks."""
    if isinstance(cond, Atom):
        return [cond]
    if isinstance(cond, AllOf):
        return [a for c in cond.all for a in top_level_atoms(c)]
    return []


def _range(atom: Atom) -> tuple[float, float, bool, bool] | None:
    v = atom.value
    if isinstance(v, (Ref, bool)):
        return None
    inf = float("inf")
    try:
        if atom.op == "gt":
            return float(v), inf, False, True
        if atom.op == "gte":
            return float(v), inf, True, True
        if atom.op == "lt":
            return -inf, float(v), True, False
        if atom.op == "lte":
            return -inf, float(v), True, True
        if atom.op == "between":
            return float(v[0]), float(v[1]), True, True
        if atom.op == "eq" and isinstance(v, (int, float)):
            return float(v), float(v), True, True
    except (TypeError, ValueError):
        return None
    return None


def atoms_disjoint(a: Atom, b: Atom) -> bool:
    """True when no value can satisfy both atoms on the same path (conservative)."""
    if a.path != b.path or isinstance(a.value, Ref) or isinstance(b.value, Ref):
        return False
    if FACT_PATHS.get(a.path) == "version":
        return False

    def values(atom: Atom) -> set | None:
        if atom.op == "eq":
            return {_hashable(atom.value)}
        if atom.op == "in":
            return {_hashable(v) for v in atom.value}
        return None

    va, vb = values(a), values(b)
    if va is not None and vb is not None:
        return not (va & vb)
    if va is not None and b.op in ("ne", "not_in"):
        excluded = {_hashable(b.value)} if b.op == "ne" else {_hashable(v) for v in b.value}
        return va <= excluded
    if vb is not None and a.op in ("ne", "not_in"):
        return atoms_disjoint(b, a)
    if a.op == "is_set" and b.op == "is_set":
        return a.value != b.value
    if a.op == "is_set" and a.value is False and b.op not in ("ne", "not_in", "is_set"):
        return True
    if b.op == "is_set" and b.value is False and a.op not in ("ne", "not_in", "is_set"):
        return True
    ra, rb = _range(a), _range(b)
    if ra and rb:
        lo = max(ra[0], rb[0])
        hi = min(ra[1], rb[1])
        if lo > hi:
            return True
        if lo == hi:
            lo_incl = (ra[2] if ra[0] == lo else True) and (rb[2] if rb[0] == lo else True)
            hi_incl = (ra[3] if ra[1] == hi else True) and (rb[3] if rb[1] == hi else True)
            return not (lo_incl and hi_incl)
    if va is not None and rb:
        return all(not (isinstance(v, (int, float)) and rb[0] <= v <= rb[1]) for v in va)
    if vb is not None and ra:
        return all(not (isinstance(v, (int, float)) and ra[0] <= v <= ra[1]) for v in vb)
    return False


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (list, dict)) else value


def conditions_disjoint(a: Condition, b: Condition) -> bool:
    """True when the two conditions provably never hold together."""
    return any(atoms_disjoint(x, y) for x in top_level_atoms(a) for y in top_level_atoms(b))


def _eq_sets(cond: Condition) -> dict[str, set]:
    """Per path, the values a top-level `eq`/`in` atom allows (intersected when a path repeats); the
    atoms `atoms_disjoint` compares by value set."""
    out: dict[str, set] = {}
    for atom in top_level_atoms(cond):
        if atom.op not in ("eq", "in") or isinstance(atom.value, Ref) or FACT_PATHS.get(atom.path) == "version":
            continue
        values = {_hashable(atom.value)} if atom.op == "eq" else {_hashable(v) for v in atom.value}
        out[atom.path] = out[atom.path] & values if atom.path in out else values
    return out


def overlap_candidates(conds: Sequence[Condition]) -> Iterator[tuple[int, int]]:
    """Index pairs `(i, j)`, `i < j`, that `conditions_disjoint` might not prove disjoint: a superset
    of the overlapping pairs, found without comparing every pair.

    Conditions are bucketed by the value of the most common `eq`/`in` path; two conditions in
    different buckets of one path are disjoint (`atoms_disjoint`), so only pairs within a bucket,
    and pairs involving conditions without that path, are candidates. Buckets split again by the
    next path. Files of per-model rules thus cost about n log n instead of n².
    """
    sets = [_eq_sets(c) for c in conds]
    seen: set[tuple[int, int]] = set()
    for i, j in _candidates(list(range(len(conds))), sets, frozenset()):
        pair = (i, j) if i < j else (j, i)
        if pair not in seen:
            seen.add(pair)
            yield pair


def _candidates(members: list[int], sets: list[dict[str, set]], used: frozenset) -> Iterator[tuple[int, int]]:
    counts = Counter(path for i in members for path in sets[i] if path not in used)
    path, n = counts.most_common(1)[0] if counts else (None, 0)
    if len(members) <= 8 or n < 2:
        yield from itertools.combinations(members, 2)
        return
    with_path = [i for i in members if path in sets[i]]
    rest = [i for i in members if path not in sets[i]]
    buckets: dict[Any, list[int]] = defaultdict(list)
    for i in with_path:
        for value in sets[i][path]:
            buckets[value].append(i)
    for bucket in buckets.values():
        yield from _candidates(bucket, sets, used | {path})
    yield from itertools.product(rest, with_path)
    yield from _candidates(rest, sets, used | {path})
