"""Value ranges SGLang's parser does not check (servetune.catalog.ranges)."""

from __future__ import annotations

import pytest

from servetune.catalog import load_catalog
from servetune.catalog.ranges import FIELD_RANGES, ValueRange, check_range
from servetune.catalog.values import coerce_field

VERSIONS = ("0.5.23", "0.5.17", "0.5.10")


def test_every_checked_field_is_a_number_in_a_catalogued_release():
    """A typo in the table would check nothing: each name is an int or float field somewhere."""
    catalogs = [load_catalog(v) for v in VERSIONS]
    for name in FIELD_RANGES:
        types = {c.fields[name].type for c in catalogs if name in c.fields}
        assert types and types <= {"int", "float"}, (name, types)


def test_sglang_defaults_are_inside_the_ranges():
    """SGLang's own declared defaults must pass, or servetune would refuse what SGLang ships."""
    for version in VERSIONS:
        catalog = load_catalog(version)
        for name in FIELD_RANGES:
            spec = catalog.fields.get(name)
            if spec is not None and spec.default is not None:
                check_range(name, spec.default)


@pytest.mark.parametrize(
    ("name", "text", "ok"),
    [
        ("pp_size", "1", True),
        ("pp_size", "0", False),
        ("mem_fraction_static", "0.88", True),
        ("mem_fraction_static", "1.0", False),
        ("mem_fraction_static", "0", False),
        ("chunked_prefill_size", "-1", True),
        ("chunked_prefill_size", "0", False),
        ("chunked_prefill_size", "-2", False),
        ("schedule_conservativeness", "0.3", True),
        ("schedule_conservativeness", "0", False),
        ("stream_interval", "8", True),
    ],
)
def test_coerce_field_refuses_what_sglang_cannot_use(name, text, ok):
    spec = load_catalog("0.5.23").fields[name]
    if ok:
        assert coerce_field(spec, text, from_text=True) == pytest.approx(float(text))
    else:
        with pytest.raises(ValueError, match=rf"{name} must be .*\("):
            coerce_field(spec, text, from_text=True)


def test_range_wording_and_sentinels():
    r = ValueRange("why", min=1, also=(-1,))
    assert r.text() == "-1 or >= 1"
    assert r.holds(-1) and not r.holds(-1, sentinels=False) and not r.holds(0)
    assert ValueRange("why", gt=0, lt=1).text() == "> 0 and < 1"
    check_range("pp_size", True)  # a bool is a type question, not a range one
    check_range("not_a_field", -5)
