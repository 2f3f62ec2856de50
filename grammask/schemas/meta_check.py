"""A fast yes to "does this schema conform to its meta-schema?", compiled once per draft.

``jsonschema`` interprets the meta-schema at every subschema of every schema it checks (about 2 ms
per kilobyte of schema, tens of milliseconds on a large one: most of a cold compile). The
meta-schemas use a dozen keywords, so each is compiled here into nested closures; a schema the
closures accept is accepted, and only a schema they reject goes to ``jsonschema``, which then names
the error (and decides: a closure may be stricter than ``jsonschema``, never laxer).

A meta-schema with a keyword this module does not know is not compiled (``None``): its schemas are
checked by ``jsonschema`` alone. Formats are not checked, as ``jsonschema`` does not check them
without a format checker.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset({
    "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "definitions", "$defs",
    "deprecated", "readOnly", "writeOnly", "$vocabulary", "format",
})


class _Unknown(Exception):
    """The meta-schema uses a keyword (or form of one) that is not compiled here."""


def compile_meta_schema(meta_schema: dict, draft: int) -> Check | None:
    """A check that is true only for schemas ``meta_schema`` accepts, or ``None`` when it cannot be compiled.

    Args:
        meta_schema: a self-contained meta-schema (every ``$ref`` a local JSON pointer).
        draft: 4, 6, 7 or 2020 (how ``type``, ``$ref`` siblings and ``exclusiveMinimum`` read).
    """
    try:
        return _Compiler(meta_schema, draft).compile(meta_schema)
    except _Unknown:
        return None


class _Compiler:
    def __init__(self, root: dict, draft: int) -> None:
        self.root, self.draft = root, draft
        self.by_pointer: dict[str, Check] = {}
        self.is_type = _type_checks(draft)

    def compile(self, schema: Any) -> Check:
        if schema is True or schema == {}:
            return _always
        if schema is False:
            return _never
        if not isinstance(schema, dict):
            raise _Unknown(schema)
        if "$ref" in schema and self.draft <= 7:
            return self._ref(schema["$ref"])  # siblings of $ref are ignored before 2019-09
        checks = []
        for key, value in schema.items():
            if key in _ANNOTATIONS:
                continue
            make = getattr(self, "_" + key.lstrip("$"), None)
            if make is None:
                raise _Unknown(key)
            check = make(value, schema) if key != "$ref" else self._ref(value)
            if check is not None:
                checks.append(check)
        return _all_of(checks)

    def _ref(self, pointer: Any) -> Check:
        if not isinstance(pointer, str) or not pointer.startswith("#"):
            raise _Unknown(pointer)
        if pointer not in self.by_pointer:
            box: list[Check] = []
            self.by_pointer[pointer] = lambda instance: box[0](instance)  # recursion through the box
            box.append(self.compile(_follow(self.root, pointer)))
        return self.by_pointer[pointer]

    def _type(self, value: Any, schema: dict) -> Check:
        names = [value] if isinstance(value, str) else value
        try:
            tests = tuple(self.is_type[name] for name in names)
        except (KeyError, TypeError):
            raise _Unknown(value) from None
        return lambda instance: any(test(instance) for test in tests)

    def _properties(self, value: dict, schema: dict) -> Check:
        checks = {name: self.compile(sub) for name, sub in value.items()}
        return lambda instance: not isinstance(instance, dict) or all(
            checks[k](v) for k, v in instance.items() if k in checks
        )

    def _additionalProperties(self, value: Any, schema: dict) -> Check | None:
        if "patternProperties" in schema:
            raise _Unknown("patternProperties")
        named = set(schema.get("properties", ()))
        check = self.compile(value)
        if check is _always:
            return None
        return lambda instance: not isinstance(instance, dict) or all(
            check(v) for k, v in instance.items() if k not in named
        )

    def _propertyNames(self, value: Any, schema: dict) -> Check:
        check = self.compile(value)
        return lambda instance: not isinstance(instance, dict) or all(check(k) for k in instance)

    def _items(self, value: Any, schema: dict) -> Check:
        if not isinstance(value, (dict, bool)):
            raise _Unknown("items as an array")
        check = self.compile(value)
        return lambda instance: not isinstance(instance, list) or all(check(item) for item in instance)

    def _allOf(self, value: list, schema: dict) -> Check:
        return _all_of([self.compile(sub) for sub in value])

    def _anyOf(self, value: list, schema: dict) -> Check:
        checks = [self.compile(sub) for sub in value]
        return lambda instance: any(check(instance) for check in checks)

    def _enum(self, value: list, schema: dict) -> Check:
        return lambda instance: any(_equal(instance, option) for option in value)

    def _minimum(self, value: Any, schema: dict) -> Check:
        exclusive = self.draft == 4 and schema.get("exclusiveMinimum") is True
        if exclusive:
            return lambda instance: not _is_number(instance) or instance > value
        return lambda instance: not _is_number(instance) or instance >= value

    def _exclusiveMinimum(self, value: Any, schema: dict) -> Check | None:
        if isinstance(value, bool):
            if self.draft != 4:
                raise _Unknown("exclusiveMinimum")
            return None  # read with minimum
        return lambda instance: not _is_number(instance) or instance > value

    def _minItems(self, value: int, schema: dict) -> Check:
        return lambda instance: not isinstance(instance, list) or len(instance) >= value

    def _uniqueItems(self, value: bool, schema: dict) -> Check | None:
        if not value:
            return None
        return lambda instance: not isinstance(instance, list) or _all_distinct(instance)

    def _pattern(self, value: str, schema: dict) -> Check:
        search = re.compile(value).search
        return lambda instance: not isinstance(instance, str) or search(instance) is not None

    def _dependencies(self, value: dict, schema: dict) -> Check:
        checks = []
        for name, need in value.items():
            if isinstance(need, list):
                checks.append(lambda instance, name=name, need=tuple(need): name not in instance or all(n in instance for n in need))
            else:
                sub = self.compile(need)
                checks.append(lambda instance, name=name, sub=sub: name not in instance or sub(instance))
        return lambda instance: not isinstance(instance, dict) or all(check(instance) for check in checks)


def _follow(root: dict, pointer: str) -> Any:
    node: Any = root
    for part in pointer[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError):
            raise _Unknown(pointer) from None
    return node


def _always(instance: Any) -> bool:
    return True


def _never(instance: Any) -> bool:
    return False


def _all_of(checks: list[Check]) -> Check:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda instance: all(check(instance) for check in checks)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_checks(draft: int) -> dict[str, Check]:
    def integer(value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        return draft > 4 and isinstance(value, float) and math.isfinite(value) and value.is_integer()

    return {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
        "number": _is_number,
        "integer": integer,
    }


def _equal(a: Any, b: Any) -> bool:
    """JSON equality as ``jsonschema`` reads it: ``1 == 1.0``, but ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(b, (dict, list)):
        return False
    return type(a) is type(b) and a == b if not (_is_number(a) and _is_number(b)) else a == b


def _all_distinct(items: list) -> bool:
    """No two items :func:`_equal` (hashing the scalars; containers compared pairwise)."""
    seen: set = set()
    containers = []
    for item in items:
        if isinstance(item, (dict, list)):
            containers.append(item)
            continue
        key = (type(item) is bool, item) if not _is_number(item) else (False, item)
        if isinstance(item, str):
            key = ("s", item)
        if key in seen:
            return False
        seen.add(key)
    return all(not _equal(x, y) for i, x in enumerate(containers) for y in containers[i + 1 :])
