"""Packages that import what they re-export on first use.

``import grammask`` (and so the ``grammask`` command's ``--help``) must not pay for torch and
jsonschema, which together take seconds to import. A package lists each re-exported name with the
module that defines it; :func:`lazy_exports` gives the module-level ``__getattr__`` (PEP 562) and
``__dir__`` that import that module when the name is first read.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a name to the module defining it;
    a name read once is stored in ``namespace`` (the package's globals), so later reads are plain."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
