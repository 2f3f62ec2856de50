"""Checking a JSON Schema against its meta-schema before anything compiles it."""

from __future__ import annotations

from typing import Any

import jsonschema
import jsonschema.validators

from grammask.errors import InvalidSchemaError

_DEFAULT_DRAFT = jsonschema.Draft202012Validator


def validator_class(schema: Any) -> type[jsonschema.protocols.Validator]:
    """The validator of the draft a schema declares in ``$schema`` (2020-12 when absent or unknown)."""
    if isinstance(schema, dict):
        return jsonschema.validators.validator_for(schema, default=_DEFAULT_DRAFT)
    return _DEFAULT_DRAFT


def json_pointer(parts: Any) -> str:
    """RFC 6901 pointer of a path given as a sequence of keys and indices."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def check_schema(schema: Any) -> None:
    """Raise :class:`InvalidSchemaError` (with the JSON pointer of the first error) when ``schema``
    does not conform to its draft's meta-schema."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise InvalidSchemaError(f"a schema is an object or a boolean, got {type(schema).__name__}")
    cls = validator_class(schema)
    error = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is not None:
        raise InvalidSchemaError(error.message, json_pointer(error.absolute_path))
