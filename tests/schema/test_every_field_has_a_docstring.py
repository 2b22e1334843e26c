"""Schema is the documentation: every field of every data model has a description."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from pydantic import BaseModel

import servetune.schema


def _models():
    for info in pkgutil.iter_modules(servetune.schema.__path__):
        module = importlib.import_module(f"servetune.schema.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseModel) and obj.__module__ == module.__name__:
                yield obj


def test_every_schema_field_has_a_docstring():
    """No field in servetune/schema/ lacks an attribute docstring."""
    missing = [
        f"{m.__module__}.{m.__name__}.{name}"
        for m in _models()
        for name, info in m.model_fields.items()
        if not info.description
    ]
    assert not missing, missing


def test_every_schema_model_has_a_docstring():
    """Every schema class says what it is."""
    missing = [m.__name__ for m in _models() if not (m.__doc__ or "").strip()]
    assert not missing, missing
