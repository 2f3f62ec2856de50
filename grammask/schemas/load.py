"""Reading a schema as a user gives it: a dict, JSON text, a file, or a pydantic model class.

Light on purpose (no torch, no jsonschema): the command line reads and checks its ``--schema``
before any heavy work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grammask.errors import InvalidParameterError, InvalidSchemaError


def load_schema(schema: Any, field: str = "schema") -> tuple[dict[str, Any] | bool, type | None]:
    """A schema given as a dict, a bool, a JSON string, a path (``str`` or ``Path``) or a pydantic
    model class, as ``(schema, pydantic_class_or_None)``. The schema is not meta-validated here.

    Args:
        schema: the schema in any of those forms.
        field: the name errors give the argument.

    Raises:
        InvalidParameterError: a path with no file, or a value of another type.
        InvalidSchemaError: JSON text or a file that is not JSON, or JSON that is not an object or a boolean.
    """
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema(), schema
    if isinstance(schema, (dict, bool)):
        return schema, None
    if isinstance(schema, (str, os.PathLike)):
        text = str(schema)
        if isinstance(schema, str) and text.lstrip().startswith(("{", "true", "false")):
            return parse_schema_text(text, "the schema text"), None
        path = Path(text)
        if not path.is_file():
            what = "a directory" if path.is_dir() else "no such file"
            raise InvalidParameterError(field, text, f"JSON text or the path of a JSON file ({what})")
        return parse_schema_text(path.read_text(encoding="utf-8"), str(path)), None
    raise InvalidParameterError(
        field, type(schema).__name__, "a dict, a JSON string, a path to a .json file or a pydantic model class"
    )


def parse_schema_text(text: str, where: str) -> dict[str, Any] | bool:
    """The schema in JSON ``text`` (read from ``where``, named in errors)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchemaError(f"{where} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(value, (dict, bool)):
        raise InvalidSchemaError(f"{where} holds a {type(value).__name__}; a schema is an object or a boolean")
    return value
