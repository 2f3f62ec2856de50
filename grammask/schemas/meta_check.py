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


class _Parts:
    """What one subschema of a meta-schema checks, grouped by the instance type each part reads, so
    that its check tests the instance's type once and reads an object's members in one pass."""

    def __init__(self) -> None:
        self.type_ok: Check | None = None
        self.properties: dict[str, Check] = {}
        self.additional: Check | None = None  # members not named in properties
        self.names: Check | None = None
        self.objects: list[Check] = []  # each reads a dict
        self.arrays: list[Check] = []  # each reads a list
        self.numbers: list[Check] = []  # each reads an int or float, not a bool
        self.strings: list[Check] = []  # each reads a str
        self.any: list[Check] = []  # each reads any instance

    def check(self) -> Check:
        """One check of every part."""
        type_ok, general = self.type_ok, tuple(self.any)
        on_object, on_array = self._object_check(), _all_of(self.arrays) if self.arrays else None
        on_number, on_string = _all_of(self.numbers) if self.numbers else None, _all_of(self.strings) if self.strings else None
        if type_ok is None and not general and on_array is on_number is on_string is None:
            if on_object is None:
                return _always
            return lambda instance: not isinstance(instance, dict) or on_object(instance)

        def check(instance: Any) -> bool:
            if type_ok is not None and not type_ok(instance):
                return False
            if isinstance(instance, dict):
                if on_object is not None and not on_object(instance):
                    return False
            elif isinstance(instance, list):
                if on_array is not None and not on_array(instance):
                    return False
            elif isinstance(instance, str):
                if on_string is not None and not on_string(instance):
                    return False
            elif on_number is not None and _is_number(instance) and not on_number(instance):
                return False
            for part in general:
                if not part(instance):
                    return False
            return True

        return check

    def _object_check(self) -> Check | None:
        named, additional, names, rest = self.properties, self.additional, self.names, tuple(self.objects)
        if not named and additional is None and names is None:
            return _all_of(list(rest)) if rest else None
        find = named.get

        def members(instance: dict) -> bool:
            for key, value in instance.items():
                sub = find(key)
                if sub is not None:
                    if not sub(value):
                        return False
                elif additional is not None and not additional(value):
                    return False
                if names is not None and not names(key):
                    return False
            for part in rest:
                if not part(instance):
                    return False
            return True

        return members


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
        parts = _Parts()
        for key, value in schema.items():
            if key in _ANNOTATIONS:
                continue
            if key == "$ref":
                parts.any.append(self._ref(value))
                continue
            add = getattr(self, "_" + key.lstrip("$"), None)
            if add is None:
                raise _Unknown(key)
            add(value, schema, parts)
        return parts.check()

    def _ref(self, pointer: Any) -> Check:
        if not isinstance(pointer, str) or not pointer.startswith("#"):
            raise _Unknown(pointer)
        if pointer not in self.by_pointer:
            box: list[Check] = []
            self.by_pointer[pointer] = lambda instance: box[0](instance)  # recursion through the box
            box.append(self.compile(_follow(self.root, pointer)))
        return self.by_pointer[pointer]

    def _type(self, value: Any, schema: dict, parts: _Parts) -> None:
        names = [value] if isinstance(value, str) else value
        try:
            tests = tuple(self.is_type[name] for name in names)
        except (KeyError, TypeError):
            raise _Unknown(value) from None
        # The exact classes the names accept outright; any other class is asked of each test.
        exact = frozenset(cls for name in names for cls in _EXACT_CLASSES[name])

        def type_ok(instance: Any) -> bool:
            return type(instance) in exact or any(test(instance) for test in tests)

        parts.type_ok = type_ok

    def _properties(self, value: dict, schema: dict, parts: _Parts) -> None:
        parts.properties = {name: self.compile(sub) for name, sub in value.items()}

    def _additionalProperties(self, value: Any, schema: dict, parts: _Parts) -> None:
        if "patternProperties" in schema:
            raise _Unknown("patternProperties")
        check = self.compile(value)
        if check is not _always:
            parts.additional = check

    def _propertyNames(self, value: Any, schema: dict, parts: _Parts) -> None:
        check = self.compile(value)
        if check is not _always:
            parts.names = check

    def _items(self, value: Any, schema: dict, parts: _Parts) -> None:
        if not isinstance(value, (dict, bool)):
            raise _Unknown("items as an array")
        check = self.compile(value)
        parts.arrays.append(lambda instance: all(check(item) for item in instance))

    def _allOf(self, value: list, schema: dict, parts: _Parts) -> None:
        parts.any.append(_all_of([self.compile(sub) for sub in value]))

    def _anyOf(self, value: list, schema: dict, parts: _Parts) -> None:
        checks = [self.compile(sub) for sub in value]
        parts.any.append(lambda instance: any(check(instance) for check in checks))

    def _enum(self, value: list, schema: dict, parts: _Parts) -> None:
        if value and all(type(option) is str for option in value):
            strings = frozenset(value)  # only a str equals a str (_equal)
            parts.any.append(lambda instance: type(instance) is str and instance in strings)
        else:
            parts.any.append(lambda instance: any(_equal(instance, option) for option in value))

    def _minimum(self, value: Any, schema: dict, parts: _Parts) -> None:
        if self.draft == 4 and schema.get("exclusiveMinimum") is True:
            parts.numbers.append(lambda instance: instance > value)
        else:
            parts.numbers.append(lambda instance: instance >= value)

    def _exclusiveMinimum(self, value: Any, schema: dict, parts: _Parts) -> None:
        if isinstance(value, bool):
            if self.draft != 4:
                raise _Unknown("exclusiveMinimum")
            return  # read with minimum
        parts.numbers.append(lambda instance: instance > value)

    def _minItems(self, value: int, schema: dict, parts: _Parts) -> None:
        parts.arrays.append(lambda instance: len(instance) >= value)

    def _uniqueItems(self, value: bool, schema: dict, parts: _Parts) -> None:
        if value:
            parts.arrays.append(_all_distinct)

    def _pattern(self, value: str, schema: dict, parts: _Parts) -> None:
        search = re.compile(value).search
        parts.strings.append(lambda instance: search(instance) is not None)

    def _dependencies(self, value: dict, schema: dict, parts: _Parts) -> None:
        for name, need in value.items():
            if isinstance(need, list):
                parts.objects.append(lambda instance, name=name, need=tuple(need): name not in instance or all(n in instance for n in need))
            else:
                sub = self.compile(need)
                parts.objects.append(lambda instance, name=name, sub=sub: name not in instance or sub(instance))


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


_EXACT_CLASSES = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
    "number": (int, float), "integer": (int,),
}
"""Per type name, the classes whose every instance it accepts (the JSON parser's own: ``type`` is
exact, so a bool is no int here). An instance of another class is asked of the type's test."""


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
