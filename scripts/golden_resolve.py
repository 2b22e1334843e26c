"""Record (or check) the resolved launch for every bundled model, GPU profile, SGLang catalog,
workload and preset: the golden file that pins resolve's behaviour across refactors.

    python scripts/golden_resolve.py --write    # record tests/fixtures/golden/resolve.json
    python scripts/golden_resolve.py            # compare; exit 1 and name the first differences

`tests/rules/test_golden_resolve.py` runs the comparison in the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "golden" / "resolve.json"


def cases() -> list[dict]:
    """The combinations recorded: every model x GPU x catalog, plus workloads, presets and --no-rules."""
    from servetune.catalog import available_versions
    from servetune.hardware import profile_names
    from servetune.modelinfo import bundled_models

    models = sorted(bundled_models())
    gpus = sorted(profile_names())
    versions = sorted(available_versions())
    out = [{"model": m, "gpu": g, "sglang_version": v} for m in models for g in gpus for v in versions]
    for workload in ("single-image-stream", "cached-images", "text-chat", "long-context"):
        for m in models:
            for g in ("h200", "h100-sxm:8", "l40s"):
                out.append({"model": m, "gpu": g, "workload": workload})
    for preset in ("multimodal-high-concurrency", "text-chat-latency"):
        for m in models:
            out.append({"model": m, "gpu": "h200", "preset": preset})
    for m in models:
        out.append({"model": m, "gpu": "h200", "use_rules": False})
        out.append({"model": m, "gpu": "h200", "sets": ["max_running_requests=512"], "tp": 1})
    return out


def record(case: dict) -> dict:
    """What resolve produced for one case: argv, env and each decision's winner."""
    from servetune.api import resolve_launch

    kwargs = {k: v for k, v in case.items() if k != "model"}
    res = resolve_launch(case["model"], **kwargs)
    decisions = {
        name: [[d.layer, d.source, d.location, d.value, d.reason] for d in field.chain]
        for name, field in {**res.config.fields, **res.config.env}.items()
    }
    skipped = sorted(f"{s.key} {s.source}: {s.reason}" for s in res.config.skipped)
    return {"case": case, "argv": res.argv(), "env": res.env(), "decisions": decisions, "skipped": skipped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the golden file instead of comparing")
    args = parser.parse_args()
    got = [record(c) for c in cases()]
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
        print(f"recorded {len(got)} cases in {GOLDEN}")
        return 0
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = json.loads(json.dumps(got, sort_keys=True, default=str))
    diffs = [(w["case"], w, g) for w, g in zip(want, got) if w != g]
    if len(want) != len(got):
        print(f"{len(got)} cases now, {len(want)} recorded")
    for case, w, g in diffs[:5]:
        print(f"differs: {case}\n  recorded argv {w['argv']}\n  now      argv {g['argv']}")
    print(f"{len(got) - len(diffs)} of {len(want)} cases identical")
    return 1 if diffs or len(want) != len(got) else 0


if __name__ == "__main__":
    sys.exit(main())
