"""What a request asks its output to obey: a JSON Schema, a regex, an EBNF grammar or a structural tag.

Specs are small frozen dataclasses. Every option that changes the accepted language lives on
the spec (never in a global), and ``spec.cache_key`` is a stable digest of all of it, so a
compiled grammar can be cached by ``(spec.cache_key, tokenizer fingerprint, backend)``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Union

from grammask.checks import as_bool, as_int
from grammask.errors import InvalidParameterError, InvalidSchemaError


class Whitespace(str, enum.Enum):
    """Where a JSON output may hold whitespace.

    ``COMPACT`` (the default) is exactly ``json.dumps(x, separators=(",", ":"))``: no whitespace
    at all between tokens. ``FLEXIBLE`` allows a bounded run (at most
    ``JsonSchema.max_whitespace`` characters of space, newline or tab) wherever JSON allows
    whitespace. No policy allows an unbounded run: models caught in a whitespace loop are a
    classic failure of unconstrained ``\\s*`` grammars.
    """

    COMPACT = "compact"
    FLEXIBLE = "flexible"


class NumberForm(str, enum.Enum):
    """How a JSON output may spell a number. No form uses exponents, and every value a schema
    allows keeps at least one spelling.

    ``CANONICAL`` (the default) gives each value one spelling, the shortest plain decimal: no
    leading zeros, no ``-0``, no trailing zeros after the decimal point, no fraction at all on an
    integral value (``16``, never ``16.0``; ``90``, never ``90.000…``). Like the whitespace bound,
    it keeps a model from padding a number without end. Draft 4 tells the float ``1.0`` from the
    integer ``1``, so there an integral float is written with one fraction zero (``1.0``).
    ``LENIENT`` accepts any plain decimal: ``16.0`` for an integer, ``-0``, trailing fraction
    zeros.
    """

    CANONICAL = "canonical"
    LENIENT = "lenient"


class PropertyOrder(str, enum.Enum):
    """In which order object properties may appear.

    ``DECLARED`` (the default) forces the order of ``properties`` in the schema; it keeps
    compiles small and outputs predictable, which is what generation wants. ``ANY`` accepts every
    order, which is what validation of existing documents wants; it costs more states.
    """

    DECLARED = "declared"
    ANY = "any"


class OnUnenforced(str, enum.Enum):
    """What to do when a backend cannot enforce a keyword: list it in
    :attr:`CompiledGrammar.unenforced` (``REPORT``, the default) or raise
    :class:`~grammask.errors.UnsupportedFeatureError` (``ERROR``)."""

    REPORT = "report"
    ERROR = "error"


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _enum_value(enum_type: type[enum.Enum], value: Any, name: str) -> Any:
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_type)
        raise InvalidParameterError(name, value, f"one of {allowed}") from None


def _canonical_json(schema: dict[str, Any] | bool) -> str:
    """The schema as compact JSON text; what JSON cannot hold (NaN, infinities, cycles, other
    objects) is an :class:`InvalidSchemaError` rather than non-JSON text or a foreign error."""
    try:
        return json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidSchemaError(f"not JSON data: {exc}") from None


class _Spec:
    """Shared behaviour of the spec dataclasses."""

    @property
    def cache_key(self) -> str:
        """A stable digest of the spec's kind and every field that changes its language."""
        values = [getattr(self, f.name) for f in fields(self)]  # type: ignore[arg-type]
        return _digest(type(self).__name__, [v.value if isinstance(v, enum.Enum) else v for v in values])

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class JsonSchema(_Spec):
    """A JSON Schema (any draft from 4 to 2020-12; 2020-12 when ``$schema`` is absent).

    Args:
        schema: a dict, a bool, or a JSON string. It is stored as its canonical JSON text, so the
            spec is hashable and the caller's dict may change afterwards without effect.
        whitespace: see :class:`Whitespace`. Default compact.
        max_whitespace: the longest whitespace run allowed by ``Whitespace.FLEXIBLE``.
        property_order: see :class:`PropertyOrder`. Default declared order.
        strict: when true, objects without ``additionalProperties`` get no extra properties and
            arrays without ``items`` get no extra items (what most generation APIs do). Default
            false: JSON Schema's own semantics, where absent means allowed.
        max_depth: how deep recursion (``$ref`` cycles) and "any JSON value" are unrolled by
            backends that need a bound. Reported in ``narrowed`` when a backend uses it.
        on_unenforced: see :class:`OnUnenforced`.
        assert_formats: enforce ``format`` (default true: outputs are meant to be used, so a
            ``"format": "date"`` string should be a date). False treats it as an annotation, as
            JSON Schema 2020-12 does unless a validator opts in.
        number_form: see :class:`NumberForm`. Default canonical.
    """

    schema_json: str
    whitespace: Whitespace = Whitespace.COMPACT
    max_whitespace: int = 2
    property_order: PropertyOrder = PropertyOrder.DECLARED
    strict: bool = False
    max_depth: int = 4
    on_unenforced: OnUnenforced = OnUnenforced.REPORT
    assert_formats: bool = True
    number_form: NumberForm = NumberForm.CANONICAL

    def __init__(
        self,
        schema: dict[str, Any] | bool | str,
        *,
        whitespace: Whitespace | str = Whitespace.COMPACT,
        max_whitespace: int = 2,
        property_order: PropertyOrder | str = PropertyOrder.DECLARED,
        strict: bool = False,
        max_depth: int = 4,
        on_unenforced: OnUnenforced | str = OnUnenforced.REPORT,
        assert_formats: bool = True,
        number_form: NumberForm | str = NumberForm.CANONICAL,
    ) -> None:
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise InvalidSchemaError(f"not JSON: {exc.msg} at character {exc.pos}") from None
        if not isinstance(schema, (dict, bool)):
            raise InvalidSchemaError(f"a schema is an object or a boolean, got {type(schema).__name__}")
        set_ = object.__setattr__
        set_(self, "schema_json", _canonical_json(schema))
        set_(self, "whitespace", _enum_value(Whitespace, whitespace, "whitespace"))
        set_(self, "max_whitespace", as_int("max_whitespace", max_whitespace, low=1, high=64))
        set_(self, "property_order", _enum_value(PropertyOrder, property_order, "property_order"))
        set_(self, "strict", as_bool("strict", strict))
        set_(self, "max_depth", as_int("max_depth", max_depth, low=1, high=64))
        set_(self, "on_unenforced", _enum_value(OnUnenforced, on_unenforced, "on_unenforced"))
        set_(self, "assert_formats", as_bool("assert_formats", assert_formats))
        set_(self, "number_form", _enum_value(NumberForm, number_form, "number_form"))

    @property
    def schema(self) -> dict[str, Any] | bool:
        """A fresh copy of the schema (key order preserved)."""
        return json.loads(self.schema_json)

    def serialize(self, instance: Any) -> str:
        """An instance written the way this spec's grammar expects it: compact, or one space after
        ``:`` and ``,`` when flexible; numbers in their canonical form (:class:`NumberForm`, which
        every form accepts). Key order is the instance's own."""
        from grammask.schemas.normalize import draft_of

        flexible = self.whitespace is Whitespace.FLEXIBLE
        return _JsonWriter(", " if flexible else ",", ": " if flexible else ":", draft_of(self.schema) <= 4).write(instance)


class _JsonWriter:
    """``json.dumps`` (non-ASCII kept, the given separators) with numbers in canonical form."""

    def __init__(self, item_separator: str, key_separator: str, draft4: bool) -> None:
        self.item_separator = item_separator
        self.key_separator = key_separator
        self.draft4 = draft4

    def write(self, value: Any) -> str:
        if isinstance(value, dict):
            members = (json.dumps(str(k), ensure_ascii=False) + self.key_separator + self.write(v) for k, v in value.items())
            return "{" + self.item_separator.join(members) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + self.item_separator.join(self.write(v) for v in value) + "]"
        if isinstance(value, float) and math.isfinite(value):
            return canonical_number_text(value, draft4=self.draft4)
        return json.dumps(value, ensure_ascii=False)


def canonical_number_text(value: int | float | Decimal, *, draft4: bool = False) -> str:
    """The one spelling :attr:`NumberForm.CANONICAL` gives ``value``: the shortest plain decimal
    (``16.0`` → ``"16"``, ``-0.0`` → ``"0"``, ``1e-7`` → ``"0.0000001"``). With ``draft4``, an
    integral float keeps one fraction zero (``"16.0"``), as draft 4 tells it from the integer."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        return str(value)
    exact = value if isinstance(value, Decimal) else Decimal(repr(value))
    if exact == exact.to_integral_value():
        whole = str(int(exact))
        return whole + ".0" if draft4 and not isinstance(value, Decimal) else whole
    return format(exact.normalize(), "f")


@dataclass(frozen=True)
class Regex(_Spec):
    """A regular expression that the whole output must match (ECMA-262 / JSON Schema ``pattern``
    syntax as the ``regex`` module reads it, implicitly anchored at both ends)."""

    pattern: str

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise InvalidParameterError("pattern", self.pattern, "a str")


@dataclass(frozen=True)
class Ebnf(_Spec):
    """A context-free grammar in GBNF-style EBNF (``root ::= ...``), as xgrammar reads it."""

    grammar: str
    root: str = "root"

    def __post_init__(self) -> None:
        if not isinstance(self.grammar, str) or not self.grammar.strip():
            raise InvalidParameterError("grammar", self.grammar, "a non-empty EBNF string")
        if not isinstance(self.root, str) or not self.root:
            raise InvalidParameterError("root", self.root, "the non-empty name of a rule")


@dataclass(frozen=True)
class Tag:
    """One structural tag: text ``begin``, then content obeying ``content``, then text ``end``.

    Example: ``Tag("<function=get_weather>", JsonSchema({...}), "</function>")``.
    """

    begin: str
    content: JsonSchema | Regex | Ebnf
    end: str

    def __post_init__(self) -> None:
        if not isinstance(self.begin, str) or not self.begin:
            raise InvalidParameterError("Tag.begin", self.begin, "a non-empty string")
        if not isinstance(self.content, (JsonSchema, Regex, Ebnf)):
            raise InvalidParameterError("Tag.content", self.content, "a JsonSchema, Regex or Ebnf")
        if not isinstance(self.end, str):
            raise InvalidParameterError("Tag.end", self.end, "a string")


def _sequence_of(name: str, values: Any, kind: type, words: str) -> tuple:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise InvalidParameterError(name, type(values).__name__, words)
    for i, value in enumerate(values):
        if not isinstance(value, kind):
            raise InvalidParameterError(f"{name}[{i}]", type(value).__name__, words)
    return tuple(values)


@dataclass(frozen=True)
class StructuralTag(_Spec):
    """Free text in which structured segments may appear (function calls, tool tags).

    Output is free text until one of ``triggers`` appears; from there the text must continue as
    the ``begin`` of a tag that starts with that trigger, then the tag's content, then its ``end``,
    then free text again. Each trigger must be a prefix of at least one tag's ``begin``.
    """

    tags: tuple[Tag, ...]
    triggers: tuple[str, ...]

    def __init__(self, tags: list[Tag] | tuple[Tag, ...], triggers: list[str] | tuple[str, ...]) -> None:
        tags = _sequence_of("tags", tags, Tag, "a list of Tag")
        triggers = _sequence_of("triggers", triggers, str, "a list of strings")
        if not tags:
            raise InvalidParameterError("tags", tags, "at least one Tag")
        for i, trigger in enumerate(triggers):
            if not any(t.begin.startswith(trigger) for t in tags):
                raise InvalidParameterError(f"triggers[{i}]", trigger, "a prefix of some tag's begin")
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "triggers", triggers)

    @property
    def cache_key(self) -> str:
        return _digest("StructuralTag", [(t.begin, t.content.cache_key, t.end) for t in self.tags], self.triggers)

    @classmethod
    def from_dict(cls, value: Any) -> "StructuralTag":
        """A structural tag from its plain form, as OpenAI-style APIs (vLLM, SGLang) take it::

            {"type": "structural_tag",
             "structures": [{"begin": "<function=get_weather>", "schema": {...}, "end": "</function>"}],
             "triggers": ["<function="]}

        ``"type"`` may be left out. Each structure's content is a JSON Schema (``"schema"``).

        Raises:
            InvalidParameterError: naming the first field that is missing or of the wrong shape.
        """
        if not isinstance(value, dict):
            raise InvalidParameterError("structural_tag", type(value).__name__, "an object")
        if value.get("type", "structural_tag") != "structural_tag":
            raise InvalidParameterError("structural_tag.type", value["type"], "'structural_tag'")
        structures, triggers = value.get("structures"), value.get("triggers")
        if not isinstance(structures, list) or not structures:
            raise InvalidParameterError("structural_tag.structures", structures, "a non-empty list of {begin, schema, end}")
        if not isinstance(triggers, list) or not all(isinstance(t, str) and t for t in triggers):
            raise InvalidParameterError("structural_tag.triggers", triggers, "a list of non-empty strings")
        tags = []
        for i, item in enumerate(structures):
            where = f"structural_tag.structures[{i}]"
            if not isinstance(item, dict) or not {"begin", "schema", "end"} <= item.keys():
                raise InvalidParameterError(where, item, "an object with begin, schema and end")
            if not isinstance(item["begin"], str) or not isinstance(item["end"], str):
                raise InvalidParameterError(where, item, "begin and end as strings")
            tags.append(Tag(item["begin"], JsonSchema(item["schema"]), item["end"]))
        return cls(tags, triggers)


Spec = Union[JsonSchema, Regex, Ebnf, StructuralTag]
"""Any of the four spec kinds."""
