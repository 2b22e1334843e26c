"""How `load_rules` scales with the size of a user rule file.

    python benchmarks/rule_scaling.py [--sizes 1000 2000 4000 8000] [--runs 3]

Each size is a generated file of N `prefer` rules, the shape a large per-model rule file has:
every rule matches one model architecture (`model.arch: ArchK`) and sets one of a few fields,
so most pairs share a field with different values and must be proven disjoint. A quarter of the
rules add a numeric condition and a `supersedes`, so the conflict check sees both kinds of pairs.
Printed: the best load time of `--runs` (built-in rules and catalogs included) and the time per
rule; linear or n log n scaling keeps the per-rule figure flat.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

FIELDS = ("chunked_prefill_size", "max_running_requests", "mem_fraction_static", "schedule_conservativeness")


def rule_file(n: int) -> str:
    """YAML text of `n` generated rules."""
    lines = ["rules:"]
    for i in range(n):
        field = FIELDS[i % len(FIELDS)]
        value = (
            round(0.5 + (i % 40) / 100, 2) if field in ("mem_fraction_static", "schedule_conservativeness") else 64 + i
        )
        lines += [
            f"  - id: generated-{i:05d}",
            f"    summary: Generated rule {i}.",
            "    why: Generated for the scaling benchmark.",
            "    when:",
            f"      model.arch: Arch{i // 2}",
        ]
        if i % 4 == 3:
            lines += ["      gpu.count: {gte: 2}", f"    supersedes: [generated-{i - 1:05d}]"]
        lines += ["    set:", f"      {field}: {value}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from servetune.catalog import available_versions, load_catalog
    from servetune.rules import load_rules

    catalogs = [load_catalog(v) for v in available_versions()]
    print(f"{'rules':>6}  {'bytes':>9}  {'load s':>7}  {'us/rule':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"rules-{n}.yaml"
            path.write_text(rule_file(n), encoding="utf-8")
            best = float("inf")
            for _ in range(args.runs):
                t0 = time.perf_counter()
                loaded = load_rules([path], catalogs=catalogs)
                best = min(best, time.perf_counter() - t0)
            assert sum(not r.builtin for r in loaded.rules) == n
            print(f"{n:>6}  {path.stat().st_size:>9,}  {best:>7.3f}  {best / n * 1e6:>7.0f}")


if __name__ == "__main__":
    main()
