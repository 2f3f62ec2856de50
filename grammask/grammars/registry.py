"""The registry of backends, by name.

A backend registers itself with :func:`register_backend`; :func:`backend_class` finds it by name
and imports the built-in ones lazily, so an optional dependency costs nothing until it is used.
"""

from __future__ import annotations

import importlib

from grammask.errors import InvalidParameterError
from grammask.grammars.base import Backend

_BACKENDS: dict[str, type[Backend]] = {}
# Built-in backends and the module that registers each (imported on first use).
_BUILTIN_MODULES = {
    "xgrammar": "grammask.grammars.xgrammar_backend",
    "fsm": "grammask.grammars.fsm",
}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    _BACKENDS[cls.name] = cls
    return cls


def backend_class(name: str) -> type[Backend]:
    """The backend registered as ``name``.

    Raises:
        InvalidParameterError: no backend has that name.
    """
    if name not in _BACKENDS and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    try:
        return _BACKENDS[name]
    except KeyError:
        known = sorted({*_BUILTIN_MODULES, *_BACKENDS, "auto"})
        raise InvalidParameterError("backend", name, f"one of {known}") from None


def available_backends() -> list[str]:
    """Names of the backends that can be loaded here (``"auto"`` is a policy, not listed)."""
    names = []
    for name in dict.fromkeys([*_BUILTIN_MODULES, *_BACKENDS]):
        try:
            backend_class(name)
        except (ImportError, InvalidParameterError):
            continue
        names.append(name)
    return names
