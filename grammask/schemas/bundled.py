"""Example schemas that ship with grammask (each holds a valid instance in its ``examples``)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def example_schema_names() -> list[str]:
    """Names of the bundled example schemas."""
    folder = resources.files("grammask.schemas").joinpath("examples")
    return sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".json"))


def example_schema(name: str) -> dict[str, Any]:
    """The bundled schema ``name`` (see :func:`example_schema_names`)."""
    if name not in example_schema_names():
        raise KeyError(f"no bundled schema {name!r}; expected one of {example_schema_names()}")
    text = resources.files("grammask.schemas").joinpath("examples", f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)
