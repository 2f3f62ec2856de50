"""The registry of backends, by name.

A backend registers itself with :func:`register_backend`; :func:`backend_class` finds it by name
and imports the built-in ones lazily, so an optional dependency costs nothing until it is used.
:func:`check_backend_name` checks a name without importing any backend (the command line checks
names before any heavy work).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from grammask.errors import InvalidParameterError

if TYPE_CHECKING:
    from grammask.grammars.base import Backend

AUTO = "auto"
"""The policy that picks a backend per spec (:func:`grammask.grammars.compiler.auto_order`)."""

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


def backend_names() -> list[str]:
    """Every backend name known here (built-in or registered), whether or not it can be loaded,
    and ``"auto"``. Imports nothing."""
    return sorted({*_BUILTIN_MODULES, *_BACKENDS, AUTO})


def check_backend_name(name: str, field: str = "backend") -> str:
    """``name`` if it names a backend or ``"auto"``; else :class:`InvalidParameterError` for ``field``,
    suggesting the closest name. Imports no backend."""
    if name not in backend_names():
        raise InvalidParameterError.unknown_name(field, name, backend_names())
    return name


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
        raise InvalidParameterError.unknown_name("backend", name, backend_names()) from None


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
