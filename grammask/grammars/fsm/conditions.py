"""Conditions on an object's members, tracked as bits along its slot chain instead of by complements.

``{"if": {"properties": {"engine": {"const": "static"}}, "required": ["engine"]}, "then":
{"required": ["serve"]}}`` says which members an object has and what some of their values are,
and nothing else. On an object it is a boolean formula over three kinds of atoms:

* ``("required", name)``: the member is present;
* ``("absent", name)``: it is not (``"properties": {name: false}``);
* ``("value", name, key)``: it is absent or its value satisfies the subschema ``key`` names;

and two that do not depend on the members: ``("type", names)`` (``"object"`` among them?) and
``("other", keyword)``, an assertion about values of another type (``minLength``), true of objects.

:class:`ConditionReader` reads such a formula from the in-place keywords of a schema (``required``,
``properties``, ``dependentRequired``, ``dependentSchemas``, ``type``, ``not``, ``if`` / ``then`` /
``else``, ``allOf`` / ``anyOf`` / ``oneOf``, ``$ref`` within the document); any other assertion
makes it decline. The object lowering then gives each name and each value atom a bit
(:class:`ConditionBits`), sets them as members are written (a member a value atom reads has one
slot per verdict) and closes the object only where the formula holds. The language stays plain,
so member values can still call rules and no state needs a search to know it is live.

On a value that is not an object, ``required``, ``properties`` and ``dependentRequired`` hold
whatever they say; :func:`holds_for_type` evaluates a formula there, so a schema whose conditions
reject every string (``oneOf`` of two ``required`` lists) is known to allow objects only.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable

from grammask.grammars.fsm import merge as M
from grammask.schemas.normalize import normalize_keywords

Formula = Any
"""``True``, ``False``, an atom tuple, or ``(operator, parts)`` with operator ``and`` / ``or`` /
``one`` (exactly one part holds) / ``not`` (one part)."""

MAX_CONDITION_COMBINATIONS = 4096
"""Conditions are tracked where the product over the names they read of (1 + the verdict
combinations of the value atoms on the name) is at most this: a bound on the bit sets the slot
chain can carry, and so on its size."""
MAX_VALUE_ATOMS_PER_NAME = 6
"""A member's value is split by at most this many subschemas (each combination of verdicts one slot
alternative, lowered as a subschema of its own where it is not a list of literals)."""
MAX_READ_DEPTH = 8
"""References and applicators followed while reading one condition."""

_OBJECT_ASSERTIONS = frozenset(("required", "properties", "dependentRequired", "type"))
_OTHER_TYPE_KEYWORDS = frozenset(
    ("items", "prefixItems", "contains", "minContains", "maxContains", "minItems", "maxItems", "uniqueItems",
     "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
     "multipleOf")
)
"""Assertions about values of other types: they hold for every object."""


def all_of(parts) -> Formula:
    parts = [p for p in parts if p is not True]
    if any(p is False for p in parts):
        return False
    return True if not parts else parts[0] if len(parts) == 1 else ("and", tuple(parts))


def any_of(parts) -> Formula:
    parts = [p for p in parts if p is not False]
    if any(p is True for p in parts):
        return True
    return False if not parts else parts[0] if len(parts) == 1 else ("or", tuple(parts))


def one_of(parts) -> Formula:
    parts = list(parts)
    if all(isinstance(p, bool) for p in parts):
        return sum(parts) == 1
    return ("one", tuple(parts))


def negate(part: Formula) -> Formula:
    return (not part) if isinstance(part, bool) else ("not", (part,))


def evaluate(formula: Formula, truth: Callable[[tuple], bool | None]) -> bool | None:
    """The formula's value with each atom's from ``truth`` (``None``: unknown, and so the result
    where it matters)."""
    if isinstance(formula, bool):
        return formula
    operator = formula[0]
    if operator not in ("and", "or", "one", "not"):
        return truth(formula)
    values = [evaluate(part, truth) for part in formula[1]]
    if operator == "not":
        return None if values[0] is None else not values[0]
    if operator == "and":
        return False if False in values else None if None in values else True
    if operator == "or":
        return True if True in values else None if None in values else False
    if None in values:
        return None if values.count(True) <= 1 else False
    return values.count(True) == 1


def atoms(formula: Formula):
    """Yield every atom of ``formula``."""
    if isinstance(formula, bool):
        return
    if formula[0] in ("and", "or", "one", "not"):
        for part in formula[1]:
            yield from atoms(part)
    else:
        yield formula


def holds_for_type(formula: Formula, type_name: str) -> bool | None:
    """The formula on any value of the basic type ``type_name`` other than object (``None``: it
    depends on the value, as ``"type": "integer"`` does on a number)."""

    def truth(atom: tuple) -> bool | None:
        if atom[0] == "other":
            return None
        if atom[0] != "type":
            return True  # required / properties hold for values that are not objects
        if type_name in atom[1]:
            return True
        return None if type_name == "number" and "integer" in atom[1] else False

    return evaluate(formula, truth)


def dependent_required(dependencies: Any) -> Formula | None:
    """The formula of ``dependentRequired`` (``None`` when malformed)."""
    if not isinstance(dependencies, dict) or not all(
        isinstance(v, list) and all(isinstance(n, str) for n in v) for v in dependencies.values()
    ):
        return None
    return all_of([any_of([negate(("required", k)), all_of([("required", n) for n in v])]) for k, v in dependencies.items()])


class ConditionReader:
    """Reads the formula of a schema's member conditions (see the module docstring).

    Args:
        resolve: ``(ref, base, path) -> (schema, base)`` of a ``$ref``.
        draft: the document's draft (keywords are normalized for it).
    """

    def __init__(self, resolve: Callable[[str, str, tuple], tuple[Any, str]], draft: int) -> None:
        self._resolve = resolve
        self._draft = draft
        self.value_schemas: dict[str, Any] = {}
        """The subschema of every value atom's key (its canonical JSON)."""

    def read(self, schema: Any, base: str, path: tuple, depth: int = 0) -> Formula | None:
        """The formula ``schema`` is on objects, or ``None`` (an assertion of another kind, a
        reference that leaves the document's base, too deep)."""
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, dict) or depth > MAX_READ_DEPTH:
            return None
        schema = normalize_keywords(schema, self._draft)
        parts: list[Formula] = []
        for keyword, value in schema.items():
            if keyword in ("then", "else") or M.is_annotation(keyword):
                continue
            if keyword in _OTHER_TYPE_KEYWORDS:
                parts.append(("other", keyword))  # holds on objects, depends on the value otherwise
                continue
            part = self._keyword(schema, keyword, value, base, path, depth)
            if part is None:
                return None
            parts.append(part)
        return all_of(parts)

    def _keyword(self, schema: dict, keyword: str, value: Any, base: str, path: tuple, depth: int) -> Formula | None:
        inner = lambda sub: self.read(sub, base, path, depth + 1)  # noqa: E731
        if keyword == "$ref":
            if not isinstance(value, str):
                return None
            target, target_base = self._resolve(value, base, path)
            return self.read(target, base, path, depth + 1) if target_base == base else None
        if keyword in _OBJECT_ASSERTIONS:
            return self._object_assertion(keyword, value)
        if keyword == "not":
            found = inner(value)
            return None if found is None else negate(found)
        if keyword == "if":
            condition, then, otherwise = inner(value), inner(schema.get("then", True)), inner(schema.get("else", True))
            if None in (condition, then, otherwise):
                return None
            return any_of([all_of([condition, then]), all_of([negate(condition), otherwise])])
        if keyword == "dependentSchemas" and isinstance(value, dict):
            found = {name: inner(sub) for name, sub in value.items()}
            if any(f is None for f in found.values()):
                return None
            # "has the member ⇒ the subschema", vacuous on values that are not objects
            return all_of([any_of([negate(("required", name)), negate(("type", frozenset({"object"}))), f]) for name, f in found.items()])
        if keyword in ("allOf", "anyOf", "oneOf") and isinstance(value, list) and value:
            found = [inner(branch) for branch in value]
            if any(f is None for f in found):
                return None
            return {"allOf": all_of, "anyOf": any_of, "oneOf": one_of}[keyword](found)
        return None

    def _object_assertion(self, keyword: str, value: Any) -> Formula | None:
        if keyword == "type":
            listed = [value] if isinstance(value, str) else value
            if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
                return None
            return ("type", frozenset(listed))
        if keyword == "required":
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                return None
            return all_of([("required", n) for n in value])
        if keyword == "dependentRequired":
            return dependent_required(value)
        if not isinstance(value, dict):
            return None
        parts = []
        for name, sub in value.items():
            if sub is False:
                parts.append(("absent", name))
            elif sub is not True and sub != {}:
                key = json.dumps(sub, sort_keys=True)
                self.value_schemas.setdefault(key, sub)
                parts.append(("value", name, key))
        return all_of(parts)


def _on_objects(atom: tuple) -> bool:
    """A ``type`` or ``other`` atom's value on every object."""
    return atom[0] == "other" or "object" in atom[1]


class ConditionBits:
    """The bits an object's slot chain carries for ``formula``: one per name an atom reads (set
    when the member is written) and one per value atom (set when the written value satisfies it).

    Attributes:
        names: ``name → bit`` of every name an atom reads.
        values: ``name → [(bit, key)]`` of the value atoms on that name.
    """

    def __init__(self, formula: Formula) -> None:
        self.formula = formula
        found = list(dict.fromkeys(atoms(formula)))
        self.names: dict[str, int] = {}
        self.values: dict[str, list[tuple[int, str]]] = {}
        for atom in found:
            if atom[0] in ("required", "absent", "value"):
                self.names.setdefault(atom[1], 1 << len(self.names))
        next_bit = len(self.names)
        for atom in found:
            if atom[0] == "value":
                self.values.setdefault(atom[1], []).append((1 << next_bit, atom[2]))
                next_bit += 1
        self.size = next_bit
        self._value_bits = {(name, key): bit for name, pairs in self.values.items() for bit, key in pairs}

    @property
    def trackable(self) -> bool:
        if any(len(atoms_here) > MAX_VALUE_ATOMS_PER_NAME for atoms_here in self.values.values()):
            return False
        combinations = 1
        for name in self.names:
            combinations *= 1 + 2 ** len(self.values.get(name, ()))
            if combinations > MAX_CONDITION_COMBINATIONS:
                return False
        return True

    def allowed(self, bits: int) -> bool:
        """Whether an object whose members set ``bits`` satisfies the formula."""

        def truth(atom: tuple) -> bool:
            if atom[0] in ("type", "other"):
                return _on_objects(atom)
            present = bool(bits & self.names[atom[1]])
            if atom[0] == "required":
                return present
            if atom[0] == "absent":
                return not present
            return not present or bool(bits & self._value_bits[atom[1], atom[2]])

        return bool(evaluate(self.formula, truth))

    def verdicts(self, name: str):
        """Yield ``(bits, satisfied keys, failed keys)`` for each combination of verdicts of the
        value atoms on ``name`` (the name's own bit included) with which the formula can still
        hold, whatever the other members."""
        atoms_here = self.values.get(name, [])
        for verdict in itertools.product((True, False), repeat=len(atoms_here)):
            satisfied = {key for (_, key), ok in zip(atoms_here, verdict) if ok}

            def truth(atom: tuple) -> bool | None:
                if atom[0] in ("type", "other"):
                    return _on_objects(atom)
                if atom[1] != name:
                    return None  # another member's: unknown here
                return atom[0] == "required" or (atom[0] == "value" and atom[2] in satisfied)

            if evaluate(self.formula, truth) is False:
                continue
            bits = self.names[name] | sum(bit for (bit, key) in atoms_here if key in satisfied)
            yield bits, [key for _, key in atoms_here if key in satisfied], [key for _, key in atoms_here if key not in satisfied]


__all__ = ["ConditionBits", "ConditionReader", "Formula", "all_of", "dependent_required", "any_of", "holds_for_type", "negate", "one_of"]
