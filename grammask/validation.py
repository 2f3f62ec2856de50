"""Validating generated outputs against their schema.

``jsonschema``'s checks (formats asserted), through :func:`grammask.schemas.validate.instance_validator`:
nothing is fetched (a reference resolves inside the schema or to a bundled meta-schema), and every
regex keyword is decided by ``grammask.grammars.fsm.patterns`` (ECMA-262, linear time) instead of
Python's backtracking ``re``. This module wires the two, as ``schemas`` imports no backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grammask.errors import InvalidSchemaError
from grammask.grammars.fsm import patterns
from grammask.schemas.validate import instance_validator

if TYPE_CHECKING:
    import jsonschema

__all__ = ["output_errors", "output_validator"]


def output_validator(schema: Any, *, assert_formats: bool = True) -> jsonschema.protocols.Validator:
    """A validator of instances of ``schema`` (its declared draft); see the module docstring.

    Its ``iter_errors`` raises ``referencing.exceptions.Unresolvable`` for a reference outside the
    schema (compiling such a schema already fails); :func:`output_errors` turns that into a
    grammask error.
    """
    return instance_validator(schema, search=patterns.search, is_regex=patterns.is_regex, assert_formats=assert_formats)


def output_errors(schema: Any, value: Any, *, assert_formats: bool = True) -> list[jsonschema.ValidationError]:
    """Every validation error of ``value`` against ``schema`` (empty when valid).

    Raises:
        InvalidSchemaError: a reference of ``schema`` resolves nowhere (nothing is fetched).
    """
    from referencing.exceptions import Unresolvable  # jsonschema's own dependency, loaded with it

    try:
        return list(output_validator(schema, assert_formats=assert_formats).iter_errors(value))
    except Unresolvable as error:
        raise InvalidSchemaError(f"reference {getattr(error, 'ref', '')!r} does not resolve inside the schema "
                                 "(grammask never fetches one)") from None
