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
import re
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Mapping, Union

from grammask.checks import as_bool, as_enum, as_int, check_instance
from grammask.errors import InvalidGrammarError, InvalidParameterError, InvalidSchemaError


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
    """A stable digest of ``parts``, each tagged and length-prefixed: a string as its UTF-8 bytes
    (a schema's text is hashed as it is, not escaped into JSON again), anything else as sorted
    compact JSON. A lone surrogate is kept (``surrogatepass``): JSON text may hold one."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, str):
            tag, text = b"s", part
        elif part is True or part is False or type(part) is int:  # what json.dumps writes, without its set-up
            tag, text = b"j", "true" if part is True else "false" if part is False else str(part)
        else:
            tag, text = b"j", json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        data = text.encode("utf-8", "surrogatepass")
        digest.update(tag + len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:32]


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
        return _digest(type(self).__name__, *[v.value if isinstance(v, enum.Enum) else v for v in values])

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
        max_depth: how deep recursion (``$ref`` cycles) is unrolled where a backend must
            inline it (``fsm``: a cycle under a complement or an intersection that does not
            merge), in container levels (a cycle through several schemas spends one level per
            value it nests, not one per schema), and so are the free values ("any JSON value")
            such a schema inlines there. Reported in ``narrowed`` when a backend uses it. Other
            free values and recursion through calls have no bound.
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
        set_(self, "whitespace", as_enum("whitespace", whitespace, Whitespace))
        set_(self, "max_whitespace", as_int("max_whitespace", max_whitespace, low=1, high=64))
        set_(self, "property_order", as_enum("property_order", property_order, PropertyOrder))
        set_(self, "strict", as_bool("strict", strict))
        set_(self, "max_depth", as_int("max_depth", max_depth, low=1, high=64))
        set_(self, "on_unenforced", as_enum("on_unenforced", on_unenforced, OnUnenforced))
        set_(self, "assert_formats", as_bool("assert_formats", assert_formats))
        set_(self, "number_form", as_enum("number_form", number_form, NumberForm))

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
        return _JsonWriter(", " if flexible else ",", ": " if flexible else ":", draft_of(shared_document(self)) <= 4).write(instance)


def shared_document(spec: JsonSchema) -> dict[str, Any] | bool:
    """``spec``'s schema parsed once and kept on the spec, for grammask's own readers (the
    meta-schema check, the lowering): one parse, and one index of its references, per compile.
    Never modified by them; :attr:`JsonSchema.schema` gives a caller a copy of its own."""
    found = spec.__dict__.get("_document")
    if found is None:
        found = json.loads(spec.schema_json)
        object.__setattr__(spec, "_document", found)
    return found


LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate code point on its own (a JSON string may hold one, UTF-8 cannot carry it)."""


def json_string(value: str) -> str:
    """The one JSON spelling grammars give the string ``value``, quotes included: as
    ``json.dumps(value, ensure_ascii=False)`` writes it, except that a lone surrogate (which UTF-8
    cannot carry: a JSON string may hold one, written ``"\\ud800"``) is its escape ``\\udxxx``."""
    return LONE_SURROGATE.sub(lambda match: "\\u%04x" % ord(match.group()), json.dumps(value, ensure_ascii=False))


class _JsonWriter:
    """``json.dumps`` (non-ASCII kept, the given separators) with numbers in canonical form."""

    def __init__(self, item_separator: str, key_separator: str, draft4: bool) -> None:
        self.item_separator = item_separator
        self.key_separator = key_separator
        self.draft4 = draft4

    def write(self, value: Any) -> str:
        if isinstance(value, dict):
            members = (json_string(str(k)) + self.key_separator + self.write(v) for k, v in value.items())
            return "{" + self.item_separator.join(members) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + self.item_separator.join(self.write(v) for v in value) + "]"
        if isinstance(value, str):
            return json_string(value)
        if isinstance(value, float) and math.isfinite(value):
            return canonical_number_text(value, draft4=self.draft4)
        return json.dumps(value, ensure_ascii=False)


def canonical_number_text(value: int | float | Decimal, *, draft4: bool = False) -> str:
    """The one spelling ``NumberForm.CANONICAL`` gives ``value``: the shortest plain decimal
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


# Node types of a structural-tag format tree (xgrammar's structural-tag "format" document).
_CONTENT_NODE = "spec"
_TOKEN_NODE_TYPES = frozenset({"token", "exclude_token", "any_tokens", "token_triggered_tags", "token_dispatch"})


@dataclass(frozen=True)
class StructuralTag(_Spec):
    """Text with structured segments: function calls, tool tags, a model's tool-call format.

    Two ways to build one:

    * ``StructuralTag(tags, triggers)``: free text until one of ``triggers`` appears; from there the
      text must continue as the ``begin`` of a tag that starts with that trigger, then the tag's
      content, then its ``end``, then free text again. Each trigger must be a prefix of at least one
      tag's ``begin``. ``at_least_one`` requires a tag before the output may end;
      ``stop_after_first`` ends the output after the first tag.
    * :meth:`from_format`: any format tree in xgrammar's structural-tag schema (``sequence``,
      ``or``, ``tag``, ``token``, ``triggered_tags``, ``tags_with_separator``, ``plus``, ...), for
      formats the tags form cannot say, such as a special token at one place.

    Special tokens are allowed only where a ``token`` element names one (by id or by its text) or an
    element matches whole tokens (``any_tokens``, ``exclude_token``); text never matches them.

    Attributes:
        format_json: the canonical JSON of the format tree. Content a grammask spec compiles (every
            ``json_schema`` element in the ``json`` style, and each tag's content) stands there as
            ``{"type": "spec", "index": i}``.
        contents: those specs, in index order.
    """

    format_json: str
    contents: tuple[JsonSchema | Regex | Ebnf, ...]

    def __init__(
        self,
        tags: list[Tag] | tuple[Tag, ...],
        triggers: list[str] | tuple[str, ...],
        *,
        at_least_one: bool = False,
        stop_after_first: bool = False,
    ) -> None:
        tags = _sequence_of("tags", tags, Tag, "a list of Tag")
        triggers = _sequence_of("triggers", triggers, str, "a list of strings")
        if not tags:
            raise InvalidParameterError("tags", tags, "at least one Tag")
        for i, trigger in enumerate(triggers):
            if not any(t.begin.startswith(trigger) for t in tags):
                raise InvalidParameterError(f"triggers[{i}]", trigger, "a prefix of some tag's begin")
        tree = {
            "type": "triggered_tags",
            "triggers": list(triggers),
            "tags": [{"type": "tag", "begin": t.begin, "content": t.content, "end": t.end} for t in tags],
            "at_least_one": as_bool("at_least_one", at_least_one),
            "stop_after_first": as_bool("stop_after_first", stop_after_first),
        }
        self._set_tree(tree)

    @classmethod
    def from_format(cls, format: Mapping[str, Any] | str) -> "StructuralTag":
        """A structural tag from a format tree (a dict or its JSON text), in xgrammar's
        structural-tag schema; a whole ``{"type": "structural_tag", "format": {...}}`` document is
        accepted too. Leaves may also be grammask specs (:class:`JsonSchema`, :class:`Regex`,
        :class:`Ebnf`). A ``json_schema`` element in the ``json`` style becomes a
        :class:`JsonSchema` leaf (``any_order`` → ``PropertyOrder.ANY``, ``max_whitespace_cnt`` →
        flexible whitespace with that bound, else compact).

        Raises:
            InvalidGrammarError: the tree is not JSON, not an object, or has a node without ``type``.
        """
        if isinstance(format, str):
            try:
                format = json.loads(format)
            except json.JSONDecodeError as exc:
                raise InvalidGrammarError(f"structural tag is not JSON: {exc.msg} at character {exc.pos}") from None
        if not isinstance(format, Mapping):
            raise InvalidGrammarError(f"a structural tag format is an object, got {type(format).__name__}")
        if format.get("type") == "structural_tag":
            format = format.get("format")
            if not isinstance(format, Mapping):
                raise InvalidGrammarError("a structural_tag document needs a 'format' object")
        tag = object.__new__(cls)
        tag._set_tree(format)
        return tag

    def _set_tree(self, tree: Mapping[str, Any]) -> None:
        contents: list[JsonSchema | Regex | Ebnf] = []
        try:
            canonical = _canonical_node(tree, contents, "")
        except RecursionError:
            raise InvalidGrammarError("a structural tag format nested too deeply (or holding itself)") from None
        object.__setattr__(self, "format_json", json.dumps(canonical, ensure_ascii=False, sort_keys=True, separators=(",", ":")))
        object.__setattr__(self, "contents", tuple(contents))

    @property
    def format(self) -> dict[str, Any]:
        """A fresh copy of the canonical format tree."""
        return json.loads(self.format_json)

    @property
    def uses_tokens(self) -> bool:
        """Whether an element matches whole tokens (so special tokens may be allowed there)."""
        return _mentions_tokens(self.format)

    @property
    def cache_key(self) -> str:
        return _digest("StructuralTag", self.format_json, [c.cache_key for c in self.contents])

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


def _canonical_node(node: Any, contents: list, path: str) -> Any:
    """``node`` with grammask specs (and json-style ``json_schema`` elements) replaced by
    ``{"type": "spec", "index": i}``; other values copied."""
    if isinstance(node, (JsonSchema, Regex, Ebnf)):
        keys = [c.cache_key for c in contents]
        if node.cache_key not in keys:  # a spec used at several places is one content
            contents.append(node)
            keys.append(node.cache_key)
        return {"type": _CONTENT_NODE, "index": keys.index(node.cache_key)}
    if isinstance(node, StructuralTag):
        raise InvalidGrammarError(f"a structural tag cannot hold another structural tag (at '{path or '/'}')")
    if isinstance(node, Mapping):
        kind = node.get("type")
        if kind == "json_schema" and node.get("style", "json") == "json":
            return _canonical_node(_json_schema_leaf(node, path), contents, path)
        if kind == _CONTENT_NODE:
            raise InvalidGrammarError(f"node type 'spec' is reserved (at '{path or '/'}')")
        return {str(k): _canonical_node(v, contents, f"{path}/{k}") for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_canonical_node(v, contents, f"{path}/{i}") for i, v in enumerate(node)]
    if node is None or isinstance(node, (str, int, float, bool)):
        return node
    raise InvalidGrammarError(f"unexpected {type(node).__name__} in a structural tag (at '{path or '/'}')")


def _json_schema_leaf(node: Mapping[str, Any], path: str) -> JsonSchema:
    if "json_schema" not in node:
        raise InvalidGrammarError(f"json_schema element without 'json_schema' (at '{path or '/'}')")
    bound = node.get("max_whitespace_cnt")
    flexible = bound is not None
    return JsonSchema(
        node["json_schema"],
        whitespace=Whitespace.FLEXIBLE if flexible else Whitespace.COMPACT,
        max_whitespace=as_int(f"{path}/max_whitespace_cnt", bound, low=0) if flexible and bound else 2,
        property_order=PropertyOrder.ANY if node.get("any_order") else PropertyOrder.DECLARED,
    )


def _mentions_tokens(node: Any) -> bool:
    if isinstance(node, dict):
        return node.get("type") in _TOKEN_NODE_TYPES or any(_mentions_tokens(v) for v in node.values())
    if isinstance(node, list):
        return any(_mentions_tokens(v) for v in node)
    return False


@dataclass(frozen=True)
class Reasoning(_Spec):
    """Free text inside a reasoning model's think section, then ``content``.

    The output opens the section with the ``start`` token (unless ``started``: the prompt already
    opened it, as DeepSeek-R1's template does), then any ordinary tokens, then the ``end`` token, then
    up to ``max_gap`` characters of newlines and spaces, then text obeying ``content``. Special
    tokens other than ``start`` / ``end`` are never allowed in the section and EOS is not allowed
    before the content ends. Each of ``start`` and ``end`` must be a single token of the tokenizer.
    A thinking budget (the ``thinking_budget`` logits processor) composes: the end token
    is allowed at every step of the section, so a processor may force it.

    Use :meth:`for_model` for the known model families.
    """

    content: JsonSchema | Regex | Ebnf | StructuralTag
    start: str = "<think>"
    end: str = "</think>"
    started: bool = False
    max_gap: int = 2

    def __post_init__(self) -> None:
        check_instance("Reasoning.content", self.content, (JsonSchema, Regex, Ebnf, StructuralTag),
                       "a JsonSchema, Regex, Ebnf or StructuralTag")
        for name in ("start", "end"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise InvalidParameterError(f"Reasoning.{name}", getattr(self, name), "the text of one token, such as '</think>'")
        as_bool("Reasoning.started", self.started)
        object.__setattr__(self, "max_gap", as_int("Reasoning.max_gap", self.max_gap, low=0, high=16))

    @classmethod
    def for_model(cls, family: str, content: "JsonSchema | Regex | Ebnf | StructuralTag") -> "Reasoning":
        """The think section of a model family: ``"qwen3"`` (the output opens ``<think>``) or
        ``"deepseek_r1"`` (the prompt ends inside ``<think>``)."""
        if not isinstance(family, str) or family not in REASONING_FAMILIES:
            raise InvalidParameterError("reasoning", family, f"one of {sorted(REASONING_FAMILIES)}")
        return cls(content, **REASONING_FAMILIES[family])

    @property
    def cache_key(self) -> str:
        return _digest("Reasoning", self.content.cache_key, self.start, self.end, self.started, self.max_gap)


REASONING_FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3": {"start": "<think>", "end": "</think>", "started": False},
    "deepseek_r1": {"start": "<think>", "end": "</think>", "started": True},
}
"""Think-section conventions by model family (see :meth:`Reasoning.for_model`)."""


Spec = Union[JsonSchema, Regex, Ebnf, StructuralTag, Reasoning]
"""Any spec kind."""
