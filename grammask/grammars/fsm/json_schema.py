"""JSON Schema → one byte expression that matches exactly the valid JSON texts of a spec's policy.

Every language is written in the canonical form of the spec (whitespace policy, key order policy,
canonical strings, plain decimal numbers; see :mod:`json_text`), and the algebra is exact:
``allOf`` is ∩, ``anyOf`` ∪, ``oneOf`` "in exactly one branch", ``not`` complement,
``if/then/else`` (if ∩ then) ∪ (¬if ∩ else), ``dependentRequired`` / ``dependentSchemas`` as
"has p ⇒ …". A schema is lowered with a *recursion budget* ``b`` (``spec.max_depth`` at the root,
one less at each container level where a ``$ref`` re-enters a schema already being lowered
further up), and its language ``L`` satisfies ``Valid ∩ universe(b) ⊆ L ⊆ Valid``, where
``universe(b)`` is every canonical value nested at most ``b`` deep (every canonical value, at any
depth, when the schema has no recursion: free values are calls of a free-value rule, which ``&``
and ``¬`` read only where a part looks inside them, :func:`~grammask.grammars.fsm.expr.inter`).
Complements are therefore taken within that universe and stay sound: nothing invalid is ever
accepted; the only loss is very deep valid values of recursive schemas, reported as ``max_depth``.

Policies (documented choices):

* **Key order, DECLARED**: one global ranking of property names, by first appearance in the
  document (``properties``, ``required``, ``dependentRequired``, object keys inside ``enum`` /
  ``const``, pre-order). In an object, the names its schema object mentions (``properties``,
  ``required``) appear at most once and in rank order; other members may come before, between
  and after them. Where the schemas of one value complement one another (``oneOf``, ``not``,
  ``if``), the names any of them mentions get such slots in all of them. For the usual schema
  (one ``properties`` list per object) this is the declared order. :func:`order_instance` sorts every object by the global ranking (unranked names last),
  which every such object language accepts.
* **Key order, ANY**: any order; the names a schema object mentions appear at most once.
  Repeated *unmentioned* names are not excluded (not a regular language).
* **Whitespace**: COMPACT has none; FLEXIBLE allows up to ``max_whitespace`` of space, tab, CR,
  LF after ``{ [ , :`` and before ``} ] , :``, never around the top-level value.
* **Strings** are canonical (``json.dumps(..., ensure_ascii=False)`` spelling); **numbers** are
  plain decimals without exponent, in the spec's ``number_form`` (canonical: one spelling per value).
* **strict**: objects without ``additionalProperties`` allow no extra properties; arrays with
  ``prefixItems`` and no ``items`` allow no extra items.
* **max_depth**: where a ``$ref`` cycle must be inlined (under ``&`` or ``¬``), it is unrolled
  ``spec.max_depth`` levels; deeper values are rejected and ``max_depth`` is listed as narrowed
  whenever a cut can happen. Recursion through calls has no bound, nor have free values ("any
  JSON value"), but where a schema with recursion inlines them (under ``&`` or ``¬``) and in one
  regular expression (``lower_json_schema(calls=False)``): there they are unrolled
  ``spec.max_depth`` levels beyond the schema's own nesting, so noted.
* ``format`` is asserted (``spec.assert_formats``, by default) with the regexes of
  :mod:`grammask.schemas.formats`; unknown formats are listed as unenforced.
* ``unevaluatedProperties`` / ``unevaluatedItems`` follow what ``allOf`` and ``$ref`` evaluate;
  next to ``anyOf`` / ``oneOf`` / ``if`` / ``dependentSchemas`` / ``contains`` they raise.
* ``uniqueItems`` is enforced when items come from a small finite set (enum, const, boolean),
  listed as unenforced otherwise. ``contains`` counts are exact within the universe.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import threading
from decimal import Decimal
from typing import Any, Callable, ContextManager

from grammask.errors import CompileLimitError, InvalidSchemaError, UnsupportedFeatureError
from grammask.grammars.base import Unenforced
from grammask.grammars.fsm import conditions as C
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import json_text as T
from grammask.grammars.fsm import merge as M
from grammask.grammars.fsm.disjoint import BASIC_TYPES, DisjointnessProver, basic_type, literals, value_key
from grammask.grammars.fsm.patterns import pattern_text
from grammask.grammars.fsm.rules import Rule, known_productive
from grammask.grammars.fsm.sure import UNSURE, SureInstances
from grammask.grammars.spec import LONE_SURROGATE, JsonSchema, NumberForm, PropertyOrder, Whitespace, shared_document
from grammask.schemas.formats import NARROWED_FORMATS as FORMAT_NARROWINGS
from grammask.schemas.keywords import accepts_everything
from grammask.schemas.normalize import draft_of, normalize_keywords, without_undefined_keywords
from grammask.schemas.resolve import Resolver, resolver_of, subschemas
from grammask.schemas.validate import asserted_formats, json_pointer, stack_exhausted, unasserted_format_note

MAX_SUBSCHEMA_LOWERINGS = 20_000
MAX_NESTING = 512
MAX_REPEAT = 100_000
"""Largest length or count bound (maxLength, maxItems, maxProperties) enforced; a larger upper
bound is listed as unenforced, a larger lower bound raises."""
MAX_CHAINED_COUNT = 16
"""Largest ``minProperties`` / ``maxProperties`` carried along an object's chain of members (its
states multiply by the count); a larger one is an intersection with a counted list of members."""
MAX_CONTAINS = 1_000
"""Largest minContains / maxContains unrolled."""
MAX_CONTAINS_STATES = 4_096
"""Most (items, counted items) pairs an array with ``contains`` is read with item by item
(:meth:`_Lowerer._items_containing`); past it, its languages are intersected."""
MAX_CHECKED_LITERALS = 256
"""A schema whose ``enum`` / ``const`` lists at most this many values is lowered as the values
``jsonschema`` accepts (:meth:`_Lowerer._checked_literals`)."""
MAX_LOCATION_NAMES = 64
"""Most names one value's object languages share as slots (see :meth:`_Lowerer.location_names`)."""
_COMPLEMENTING = ("oneOf", "not", "if")

_CONSTRAINED_TYPE = {
    **dict.fromkeys(("properties", "patternProperties", "additionalProperties", "required", "propertyNames", "minProperties",
                     "maxProperties", "dependentRequired", "dependentSchemas", "unevaluatedProperties"), "object"),
    **dict.fromkeys(("items", "prefixItems", "contains", "minContains", "maxContains", "minItems", "maxItems", "uniqueItems",
                     "unevaluatedItems"), "array"),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), "string"),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), "number"),
}
"""The type each keyword that constrains values of one type constrains (``format``: the lowering
reads it in strings only, :meth:`_Lowerer._string`)."""
_TYPE_SPECIFIC = frozenset(_CONSTRAINED_TYPE)
"""Keywords that constrain values of some type (the rest apply in place or annotate)."""
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef", "dependentSchemas")
_FIRST_BYTES = {kind: sum(1 << b for b in first) for kind, first in
                {"null": b"n", "boolean": b"tf", "number": b"-0123456789", "string": b'"', "array": b"[", "object": b"{"}.items()}
"""The bytes a value of each type starts with, as a mask (a value's text starts with its first token)."""
_SCALAR_TYPES = frozenset(("null", "boolean", "number", "string"))
_OBJECT_FAILURE_KEYWORDS = frozenset(
    ("type", "properties", "patternProperties", "required", "additionalProperties", "minProperties", "maxProperties")
)
"""The assertions of an object schema whose complement :meth:`_Lowerer._objects_rejected` takes by structure."""


class DeferredLowering:
    """A schema lowered as far as its start needs: the root rule's expression now, the rules of
    subschemas with values of their own when first entered (:meth:`complete` builds the rest).

    Attributes:
        expr: the root expression (its calls name rules, some not built yet).
    """

    def __init__(self, lowerer: "_Lowerer", expr: E.Expr) -> None:
        self._lowerer = lowerer
        self.expr = expr
        self._notes: tuple | None = None

    def complete(self) -> tuple[tuple[Unenforced, ...], tuple[Unenforced, ...]]:
        """Build every rule and return ``(unenforced, narrowed)`` of the whole schema (once)."""
        if self._notes is None:
            # One budget for the whole: each build under its own would restart the clock, and a
            # schema whose builds defer ever more would never stop.
            with self._lowerer._build_lock, self._lowerer.build_budget():
                if self._notes is None:
                    self._notes = self._lowerer.complete()
        return self._notes


def lower_json_schema_deferred(
    spec: JsonSchema, *, build_budget: Callable[[], ContextManager] = contextlib.nullcontext
) -> DeferredLowering:
    """Like :func:`lower_json_schema`, leaving the subschemas with values of their own to be
    lowered when a request first reaches them (what a large schema's first mask needs is small).
    Each such build runs in ``build_budget()`` (e.g. a :class:`~grammask.grammars.fsm.expr.BuildBudget`).

    Raises:
        as :func:`lower_json_schema`, for what is lowered now; the rest raises when it is built.
    """
    lowerer = _Lowerer(spec, spec.assert_formats)
    lowerer.deferred = True
    lowerer.build_budget = build_budget
    nesting, recursive = explicit_nesting(lowerer.root, lowerer.resolver)
    lowerer.free_depth = spec.max_depth + nesting
    lowerer.recursive = recursive
    lowerer.loose_depth = nesting * (spec.max_depth + 2) + lowerer.free_depth + 1
    return DeferredLowering(lowerer, lowerer.lower(lowerer.root, spec.max_depth, lowerer.resolver.root_base, ()))


def prepare_shared_rules() -> list[Rule]:
    """Build the rule of every JSON value for the default text policy, with draft 4's numbers and
    with later drafts': per-process set-up, so that the first request with free values (an
    object's other members, by default) does not pay for it. Another policy builds its own once.

    Returns those rules, a rule of each scalar they read (a string, each number form) and the
    rule of an object's other members after their opening quote (:meth:`_Lowerer.other_members`,
    where no name is excluded): the lexical pieces every grammar of the policy calls or inlines,
    whose rows are per-tokenizer set-up too (:func:`~grammask.grammars.fsm.pushdown.prepare_rule_rows`)."""
    rules = []
    for schema in (True, {"$schema": "http://json-schema.org/draft-04/schema#"}):
        lowerer = _Lowerer(JsonSchema(schema), True)
        any_value = lowerer.any_value()
        other_member = lowerer.other_member_rest((), any_value)
        rules.append(any_value.args[0])
        rules += [Rule(name, piece) for name, piece in (("string", lowerer.any_string), ("number", lowerer.numbers.number),
                                                         ("integer", lowerer.numbers.integer), ("other member", other_member))]
    return rules


def lower_json_schema(
    spec: JsonSchema, *, assert_formats: bool | None = None, calls: bool = True
) -> tuple[E.Expr, tuple[Unenforced, ...], tuple[Unenforced, ...]]:
    """The expression of ``spec``, what it knowingly does not enforce (outputs may break it),
    and where it is narrower than the schema (valid values it rejects: the ``max_depth`` cut).

    With ``calls`` (the default), value positions call rules (:meth:`_Lowerer.value`); without,
    every value is inlined into one regular expression (recursion and free values unrolled to
    ``max_depth``: the tests' reference for the pushdown runtime).

    Raises:
        UnsupportedFeatureError: a keyword cannot be lowered (named with its JSON pointer).
        CompileLimitError: the expansion would be too large.
        InvalidSchemaError: a ``$ref`` points at nothing, or a keyword has a malformed value.
    """
    lowerer = _Lowerer(spec, spec.assert_formats if assert_formats is None else assert_formats)
    lowerer.pushdown = lowerer.free_calls = calls
    nesting, recursive = explicit_nesting(lowerer.root, lowerer.resolver)
    # Free values get max_depth levels beyond the schema's own nesting. Without recursion, no
    # value within that many levels is ever cut, so complements are exact there too.
    lowerer.free_depth = spec.max_depth + nesting
    lowerer.recursive = recursive
    # Deepest value any part of the expression can accept: the schema's own levels for each
    # recursion unroll, plus free values. Helpers that must see every member use this bound.
    lowerer.loose_depth = nesting * (spec.max_depth + 2) + lowerer.free_depth + 1
    result = lowerer.lower(lowerer.root, spec.max_depth, lowerer.resolver.root_base, ())
    return result, tuple(lowerer.unenforced.values()), tuple(lowerer.narrowed.values())


_CONTAINER_KEYWORDS = ("properties", "patternProperties", "additionalProperties", "items", "prefixItems",
                       "contains", "unevaluatedProperties", "unevaluatedItems", "dependentSchemas", "additionalItems")
_IN_PLACE_KEYWORDS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else")
_NESTING_RANK = {keyword: rank for rank, keyword in enumerate(_CONTAINER_KEYWORDS + _IN_PLACE_KEYWORDS)}


def explicit_nesting(root: Any, resolver: Resolver) -> tuple[int, bool]:
    """How many container levels the schema spells out, following ``$ref`` but not its cycles
    (recursion is what ``max_depth`` bounds), and whether it has any ``$ref`` cycle."""
    memo: dict[int, int] = {}
    on_stack: set[int] = set()
    recursive: list[int] = []

    def children(schema: dict) -> list[tuple[int, Any]]:
        # The keywords a schema has, in _NESTING_RANK's order (a cycle's cut, and so the memo,
        # depends on the order children are walked); a schema has few of the seventeen.
        found = []
        for keyword in sorted((key for key in schema if key in _NESTING_RANK), key=_NESTING_RANK.__getitem__):
            value, step = schema[keyword], int(_NESTING_RANK[keyword] < len(_CONTAINER_KEYWORDS))
            if step and keyword in ("properties", "patternProperties", "dependentSchemas") and isinstance(value, dict):
                found.extend((1, v) for v in value.values())
            elif isinstance(value, list):
                found.extend((step, v) for v in value)
            elif value is not None:
                found.append((step, value))
        if isinstance(schema.get("$ref"), str):
            try:
                found.append((0, resolver.resolve(schema["$ref"], resolver.base_of(schema), ()).schema))
            except (UnsupportedFeatureError, InvalidSchemaError):
                pass
        return found

    def walk(schema: Any) -> int:
        if not isinstance(schema, dict):
            return 0
        key = id(schema)
        if key in on_stack:
            recursive.append(key)
            return 0
        depth = memo.get(key)
        if depth is None:
            on_stack.add(key)
            depth = 0
            for step, child in children(schema):
                depth = max(depth, step + walk(child))
            memo[key] = depth
            on_stack.discard(key)
        return depth

    return walk(root), bool(recursive)


def property_ranking(schema: Any, resolver: Resolver | None = None) -> dict[str, int]:
    """The global key ranking of the DECLARED order policy (name → rank); ``resolver``: the
    document's, where the caller has one."""
    rank: dict[str, int] = {}

    def add(name: Any) -> None:
        if isinstance(name, str) and name not in rank:
            rank[name] = len(rank)

    def add_data(value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                add(key)
                add_data(sub)
        elif isinstance(value, list):
            for sub in value:
                add_data(sub)

    for node in _reachable_schemas(schema, resolver):
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                for name in value:
                    add(name)
            elif keyword == "required" and isinstance(value, list):
                for name in value:
                    add(name)
            elif keyword in ("dependentRequired", "dependencies") and isinstance(value, dict):
                for name, names in value.items():
                    add(name)
                    for other in names if isinstance(names, list) else ():
                        add(other)
            elif keyword == "enum" and isinstance(value, list):
                add_data(value)
            elif keyword == "const":
                add_data(value)
    return rank


def _reachable_schemas(root: Any, resolver: Resolver | None = None):
    """Every schema object of the document in pre-order, then those only a ``$ref`` reaches
    (a reference may point anywhere, e.g. into a non-keyword member), each once."""
    if resolver is None and isinstance(root, dict):
        resolver = resolver_of(root)
    seen: set[int] = set()
    pending = [root]
    while pending:
        refs = []
        for _, node in subschemas(pending.pop(0)):
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            yield node
            if isinstance(node.get("$ref"), str):
                refs.append(node)
        for node in refs:
            try:
                target = resolver.resolve(node["$ref"], resolver.base_of(node)).schema
            except (UnsupportedFeatureError, InvalidSchemaError):
                continue
            if id(target) not in seen:
                pending.append(target)


def order_instance(spec: JsonSchema, instance: Any) -> Any:
    """``instance`` with every object's keys in the order the spec's grammar expects."""
    if spec.property_order is PropertyOrder.ANY:
        return instance
    rank = property_ranking(without_undefined_keywords(shared_document(spec), "fsm"))

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            keys = sorted(value, key=lambda k: (0, rank[k]) if k in rank else (1, 0))
            return {k: walk(value[k]) for k in keys}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(instance)


_APPLICATORS = ("allOf", "anyOf", "oneOf")
MAX_MERGED_VIEWS = 64
"""At most this many object schemas come out of distributing a schema's applicators."""
MAX_EXCLUSIVE_VIEWS = 256
"""At most this many merged object schemas make an overlapping ``oneOf``'s objects (``_Lowerer._objects_in_one_branch``)."""
MAX_EXCLUSIVE_MEMBERS = 1024
"""And at most this many named members in all of them: a fill reads every one of them at once
(two branches of 120 members, 244 schemas of 125 members, took 5 s of fills for 20 tokens)."""
MAX_REGION_PATTERNS = 16
"""Overlapping ``patternProperties`` up to this many are read as one member per set of patterns a
name matches (:meth:`_ObjectLowering._pattern_regions`); more are intersected whole."""
MAX_PATTERN_REGIONS = 64
"""At most this many sets of patterns that overlap pairwise (each a member) for one object."""
MAX_EXCLUDED_KEY = 256
"""The longest key text (bytes) taken out of a pattern's keys without complement (one nested
call, and expression, per byte: well within Python's recursion limit)."""
CONDITION = "grammask:condition"
"""A key of merged object schemas only (never of a user's): ``(formula, value schemas)`` of the
member conditions (:mod:`~grammask.grammars.fsm.conditions`) its slot chain tracks."""
_CONDITION_KEYWORDS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas")
"""The keywords :meth:`_Lowerer._conditioned` reads as member conditions."""


_NESTED_KEYWORDS = frozenset(
    ("properties", "patternProperties", "additionalProperties", "items", "prefixItems", "contains", "allOf", "anyOf",
     "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef", "dependentSchemas", "dependencies",
     "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "definitions", "$defs")
)
"""A subschema with one of these keywords has values or subschemas of its own (lowered deferred)."""


@functools.lru_cache(maxsize=64)
def _text_pieces(flexible: bool, max_whitespace: int, canonical: bool, draft4: bool) -> tuple[E.Expr, ...]:
    """``(ws, comma, colon, any string, number forms, scalars)`` of one text policy. Kept here, with
    the derivatives cached on their nodes, for every grammar of that policy: expressions are held
    by the grammars that use them only, so a compile after the last such grammar was dropped built
    them, and derived their states, anew."""
    ws = E.repeat(E.byte_set(sum(1 << b for b in b" \t\r\n")), 0, max_whitespace) if flexible else E.EPS
    any_string = E.cat(T.QUOTE, T.CharEncoder()(T.ANY_CHARS), T.QUOTE)
    numbers = T.number_forms(canonical, draft4)
    scalars = E.alt(E.literal("null"), E.literal("true"), E.literal("false"), numbers.number, any_string)
    return ws, E.cat(ws, E.literal(","), ws), E.cat(ws, E.literal(":"), ws), any_string, numbers, scalars


_ANY_VALUE_RULES: dict[tuple, Rule] = {}
"""The any-value rule per text policy: whitespace expression, key order, scalars (shared by every grammar)."""
INLINE_NODES = 24
"""A value's expression without calls or loops and at most this many nodes is inlined, not called."""


def _inline_worthy(expr: E.Expr) -> bool:
    """Whether a value's expression is small and loop-free (``true|false``, a short enum)."""
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.kind in (E.STAR_KIND, E.COUNT_KIND, E.AND_KIND, E.NOT_KIND) or len(seen) > INLINE_NODES:
            return False
        if node.kind > E.BYTES_KIND:
            stack.extend(node.args)
    return True


def _cliques(items: list, neighbours: dict, cap: int) -> list[tuple] | None:
    """Every non-empty set of ``items`` whose members are pairwise ``neighbours`` (in ``items``'
    order), or ``None`` past ``cap`` of them."""
    found: list[tuple] = []
    stack = [((), items)]
    while stack:
        chosen, candidates = stack.pop()
        for i, item in enumerate(candidates):
            clique = (*chosen, item)
            found.append(clique)
            if len(found) > cap:
                return None
            stack.append((clique, [other for other in candidates[i + 1 :] if other in neighbours[item]]))
    return found


def _allows_anything(schema: Any) -> bool:
    """Whether ``schema`` is ``true`` in effect: ``true``, or annotations only (``{}``, a description)."""
    return schema is True or (isinstance(schema, dict) and all(M.is_annotation(k) for k in schema))


def _declared_types(schema: Any, absent: frozenset[str] | None = None) -> frozenset[str] | None:
    """The basic types ``schema``'s own valid ``type`` allows (``integer`` read as ``number``);
    ``absent`` without one, ``None`` for a bad one (reported where the schema is lowered)."""
    if isinstance(schema, dict) and "type" not in schema:
        return absent
    declared = schema.get("type") if isinstance(schema, dict) else None
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or not all(isinstance(n, str) and n in BASIC_TYPES | {"integer"} for n in names):
        return None
    return frozenset(basic_type(n) for n in names)


def _with_shared_values(views: list[dict]) -> list[dict]:
    """Object ``views`` with each member schema that equals (as JSON, :func:`value_key`) one an
    earlier view has for the same name replaced by that one object. Rules are kept per subschema object: a union of
    views calling equal but distinct subschemas at one place would hold one parse per view
    there, and multiply them at each level of a recursive member."""
    kept: dict[tuple[str, str], Any] = {}
    out = []
    for view in views:
        properties = {}
        for name, value in view["properties"].items():
            key = (name, value_key(value))
            properties[name] = kept.setdefault(key, value)
        out.append({**view, "properties": properties})
    return out


def _unmet_members(failures: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``failures`` (of :meth:`_Lowerer._object_failures`) with a required name's absence and
    its value's invalidity taken as one way to fail, ``("unmet", (name, schema))``: the name
    absent, or present with a value ``schema`` rejects. One merged view instead of two, so
    that ``oneOf`` branches that each require a name of their own (``{"required": ["=="],
    "properties": {"==": …}}``) cost one merge per other branch, not a product of two."""
    invalid = {detail[0]: detail for kind, detail in failures if kind == "invalid"}
    absent = {detail for kind, detail in failures if kind == "absent" and detail in invalid}
    out = []
    for kind, detail in failures:
        if kind == "absent" and detail in absent:
            out.append(("unmet", invalid[detail]))
        elif not (kind == "invalid" and detail[0] in absent):
            out.append((kind, detail))
    return out


def _counts_within_repeat(*counts: int | None) -> bool:
    """Whether each count bound given (``None``: no bound) is an integer in ``[0, MAX_REPEAT)``:
    a complement writes the count one past it."""
    return all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_REPEAT for n in counts if n is not None)


MAX_FOLDED_ABSENCES = 8
"""Names a ``not {"required": [...]}`` may list to be folded into the object schema (one branch each)."""


def _is_plain_ref(schema: Any) -> bool:
    """Whether ``schema`` is a ``$ref`` with nothing beside it but annotations. A ``$ref`` beside
    an assertion is two in-place parts from draft 2019-09 on (:func:`normalize_keywords` drops the
    siblings of earlier drafts)."""
    return isinstance(schema, dict) and "$ref" in schema and all(k == "$ref" or M.is_annotation(k) for k in schema)


def _dependent_alternatives(schema: dict) -> list[list[dict]] | None:
    """Per name of ``schema``'s ``dependentRequired`` and ``dependentSchemas``, the two object
    schemas whose union that dependency is: the name absent, or present with the names or the
    schema it asks for (values of other types satisfy both). ``None`` where one is malformed."""
    required, schemas = schema.get("dependentRequired", {}), schema.get("dependentSchemas", {})
    if not isinstance(required, dict) or not isinstance(schemas, dict) or not all(isinstance(v, list) for v in required.values()):
        return None
    alternatives = [[{"properties": {name: False}}, {"required": [name, *needed]}] for name, needed in required.items()]
    alternatives += [[{"properties": {name: False}}, {"required": [name], "allOf": [then]}] for name, then in schemas.items()]
    return alternatives


def _absence_folded(schema: dict) -> dict | bool:
    """``schema`` with a ``not`` of only ``required`` names folded in as the names' absence: for
    one name, ``properties: {name: false}`` (the name cannot be written, whatever else constrains
    it); for several, an ``allOf`` branch of one such object per name. Values of other types
    satisfy ``required``, so the ``not`` rejects them: the type becomes ``object`` (``false``
    where ``schema`` allows no object). ``schema`` itself where its ``not`` is another."""
    names = M.negated_required(schema.get("not"))
    if names is None or not 0 < len(names) <= MAX_FOLDED_ABSENCES:
        return schema
    declared = _declared_types(schema, absent=BASIC_TYPES)
    properties = schema.get("properties", {})
    if declared is None or not isinstance(properties, dict):
        return schema  # malformed: reported where it is lowered
    if "object" not in declared:
        return False
    folded = {k: v for k, v in schema.items() if k != "not"}
    folded["type"] = "object"
    if len(set(names)) == 1:
        folded["properties"] = {**properties, names[0]: False}
    else:
        branches = schema.get("allOf", [])
        if not isinstance(branches, list):
            return schema
        folded["allOf"] = [*branches, {"anyOf": [{"properties": {name: False}} for name in dict.fromkeys(names)]}]
    return folded


def _basic_types(types: frozenset[str] | None) -> frozenset[str]:
    """The basic types of a view's types (``None``: every type; ``integer`` as ``number``)."""
    return BASIC_TYPES if types is None else frozenset(basic_type(t) for t in types)


_TYPE_CLASSES = frozenset(("null", "boolean", "integer", "fraction", "string", "array", "object"))
"""Disjoint classes of JSON values by type: ``number`` is ``integer`` and ``fraction`` (the
numbers that are no integer, which no ``type`` names alone)."""


def _type_classes(types: frozenset[str] | None) -> frozenset[str]:
    """The value classes (:data:`_TYPE_CLASSES`) of a view's types (``None``: every type)."""
    if types is None:
        return _TYPE_CLASSES
    return frozenset(c for t in types for c in (("integer", "fraction") if t == "number" else (t,)))


def _types_of_classes(classes: frozenset[str]) -> frozenset[str] | None:
    """The view types of the value ``classes``; ``None`` where no type set says them (fractions
    without the integers)."""
    if "fraction" in classes and "integer" not in classes:
        return None
    return frozenset("number" if c == "fraction" else c for c in classes if not (c == "integer" and "fraction" in classes))


def _types_named(declared: Any) -> list:
    """The type names of a ``type`` value (a string or a list)."""
    return [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []


def _any_of(schemas: list) -> Any:
    """A schema of the values valid under some of ``schemas``: ``{"not": {}}`` for none."""
    return {"not": {}} if not schemas else schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _allows_nothing(schema: Any) -> bool:
    """Whether ``schema`` is ``false`` in effect: ``false``, or ``not`` of a schema that allows anything."""
    if schema is False:
        return True
    return isinstance(schema, dict) and "not" in schema and _allows_anything(schema["not"]) and all(
        k == "not" or M.is_annotation(k) for k in schema
    )


def _decimal(value: Any, keyword: str, path: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSchemaError(f"{keyword} must be a number, got {value!r}", path)
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _nesting(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_nesting(v) for v in value), default=0)
    return 0


class _Lowerer:
    def __init__(self, spec: JsonSchema, assert_formats: bool) -> None:
        self.spec = spec
        self.assert_formats = assert_formats
        self.root = without_undefined_keywords(shared_document(spec), "fsm")
        self.draft = draft_of(self.root)
        self.judged_formats = asserted_formats(self.root)
        self.resolver = resolver_of(self.root)
        self.prover = DisjointnessProver(self.root, self.resolver)
        self.sure = SureInstances.of_document(self.root, self.resolver, self.prover)
        self.unenforced: dict[tuple[str, str], Unenforced] = {}  # may accept invalid values
        self.narrowed: dict[tuple[str, str], Unenforced] = {}  # may reject valid values
        self.memo: dict[tuple, E.Expr] = {}
        self.steps = 0
        self.encode = T.CharEncoder()
        self.ws, self.comma, self.colon, self.any_string, self.numbers, self.scalars = _text_pieces(
            spec.whitespace is Whitespace.FLEXIBLE, spec.max_whitespace, spec.number_form is NumberForm.CANONICAL, self.draft <= 4
        )
        self.declared = spec.property_order is PropertyOrder.DECLARED
        self.rank = property_ranking(self.root, self.resolver) if self.declared else {}
        self._universes: dict[int, E.Expr] = {0: self.scalars}
        self._objects: dict[int, E.Expr] = {}
        self.loose_depth = spec.max_depth
        self.free_depth = spec.max_depth
        self.recursive = True
        self.free_calls = True
        """Whether inlined values may call the free-value rule (:attr:`free_value_call`): not in
        one regular expression (``lower_json_schema(calls=False)``)."""
        self._loose: dict[int, E.Expr] = {0: self.scalars}
        self.level = 0
        self.active_levels: dict[tuple, int] = {}
        self.charged_level = -1
        """The container level whose recursion budget a schema being lowered has already spent
        (one unit per level, however many ``$ref`` s of a cycle re-enter there)."""
        self._patterns: dict[str, E.Expr] = {}
        self._location_names: dict[tuple, frozenset[str]] = {}
        self.pushdown = True
        """Value positions call the rules of their subschemas (see :meth:`value`); off while a
        subtree that needs ∩ / ¬ over whole values is lowered, which then inlines its values."""
        self._value_rules: dict[tuple, E.Expr] = {}
        self._merged_schemas: list[dict] = []
        self._combined_schemas: dict[tuple, Any] = {}
        """A member's value conditions combined (:meth:`_ObjectLowering.value_given`), one schema
        per combination: a recursive condition then meets its own rule (:meth:`value`) rather
        than a new schema one level down, again and again."""
        self._failure_schemas: dict[tuple[int, str | None], tuple[Any, Any]] = {}
        """Per object schema under ``not`` (by id, kept alive here, and the type kept), the
        schemas of the ways to fail it and those ways (:meth:`_object_failures`)."""
        self._merged_conditions = 0
        """How many ``if``, ``dependentRequired`` and ``dependentSchemas`` object views merged
        (:meth:`_object_views`), so far: their member conditions may say them without a product."""
        self._rejected_arrays: dict[tuple[int, str | None], tuple[Any, Any]] = {}
        """Per schema under ``not`` (by id, kept alive here, and the type kept), the array views
        of what it rejects (:meth:`_rejected_array_views`)."""
        self.deferred = False
        """Subschemas with values of their own become rules built on first use (:meth:`value`)."""
        self._deferred: list[Rule] = []
        self._build_lock = threading.RLock()
        self.build_budget: Callable[[], ContextManager] = contextlib.nullcontext
        self._rules_by_body: dict[E.Expr, Rule] = {}
        self._other_members: dict[tuple, E.Expr] = {}
        self._any_value: E.Expr | None = None

    # ------------------------------------------------------------------ bookkeeping

    @functools.cached_property
    def other_key(self) -> E.Expr:
        """Every key but the ranked names (built when a complement's universe needs it)."""
        return T.string_not_in(self.rank)

    def free(self, path: tuple) -> E.Expr:
        """"Any JSON value" (``true``, absent ``items``…), at any depth: a call of the recursive
        any-value rule; where values are inlined, of the canonical free-value rule, which ``&``
        and ``¬`` read through (:attr:`free_value_call`). Where complements are bounded anyway
        (a schema with recursion: :meth:`bounded`) and in one regular expression
        (:attr:`free_calls` off), ``max_depth`` levels beyond the schema's nesting, so noted: a
        free value read through level by level down to that bound costs more searches than the
        inlined levels do.

        Keys in any order with calls: such a free value is never complemented, and the canonical
        universe is a subset of it, so the invariant of :meth:`lower` holds at a fraction of the states."""
        if self.pushdown:
            return self.any_value()
        if self.free_calls and not self.recursive:
            return self.free_value_call
        self.note_depth(path)
        return self.loose(self.free_depth)

    @functools.cached_property
    def free_value_call(self) -> E.Expr:
        """A call of this grammar's free-value rule (:attr:`~grammask.grammars.fsm.rules.Rule.free_value`):
        every canonical JSON value (:meth:`any_object`'s key order), its own values calls of it
        again. Complements taken within it are exact at any depth, and a value that no part of
        an intersection looks inside stays one call."""
        rule = Rule("any canonical JSON value")
        rule.free_value = True
        call = E.call(rule)
        array = self.list_text("[", "]", *self.open_list(call))
        rule.body = E.alt(self.scalars, array, self._object_of(call))
        return call

    def any_value(self) -> E.Expr:
        """A call of the rule of every JSON value (keys in any order, any depth), built once per
        text policy (whitespace, key order, the scalars' spellings: number form and draft) and
        shared by every grammar of that policy."""
        if self._any_value is None:
            key = (self.ws, self.spec.property_order, self.scalars)
            rule = _ANY_VALUE_RULES.get(key)
            if rule is None:
                rule = Rule("any JSON value")
                rule.shared = True
                call = E.call(rule)
                member = E.cat(self.any_string, self.colon, call)
                array = self.list_text("[", "]", *self.open_list(call))
                rule.body = E.alt(self.scalars, array, self.object_text([], member))
                _ANY_VALUE_RULES[key] = rule
            self._any_value = E.call(rule)
        return self._any_value

    def value(self, schema: Any, depth: int, base: str, path: tuple) -> E.Expr:
        """The language of a value position (an item, a member's value): a call of the rule of
        ``schema`` (one rule per subschema, shared by every position it applies to; a recursive
        ``$ref`` calls the rule being built), or its expression when that is small and plain."""
        if schema is True:
            return self.any_value()
        key = (id(schema), base) if isinstance(schema, dict) else (schema, base)
        found = self._value_rules.get(key)
        if found is not None:
            return found
        if self.deferred and isinstance(schema, dict) and _NESTED_KEYWORDS & schema.keys():
            # A subschema with values of its own is lowered when a request first enters its rule.
            rule = self._deferred_rule(json_pointer(path), functools.partial(self.lower, schema, depth, base, path))
            if self.sure.instance(schema) is not UNSURE:
                rule.productive = True  # known without building it (a state calling it need not)
            found = self._value_rules[key] = E.call(rule)
            return found
        rule = Rule(json_pointer(path))
        self._value_rules[key] = E.call(rule)  # a recursive reference meets this call
        self.level += 1
        try:
            rule.body = self.lower(schema, depth, base, path)
        except BaseException:
            del self._value_rules[key]
            raise
        finally:
            self.level -= 1
        body = rule.body
        if self._calls_rule(body, rule):
            found = E.call(rule)
        elif body is E.EMPTY or (not E.has_calls(body) and _inline_worthy(body)):
            found = body
        else:  # equal bodies (every plain string, every integer…) share one rule and its rows
            found = E.call(self._rules_by_body.setdefault(body, rule))
        self._value_rules[key] = found
        return found

    def member_call(self, path: tuple, name: str | None, member: E.Expr) -> E.Expr:
        """A member of an object (``"name":value``, or ``name`` ``None``: the other members), as
        a call of its own rule where values are called: after ``{`` or ``,`` each member a slot may
        hold is a stack of its own, whose key is read in that small rule (and its row shared by
        every slot position), rather than one alternation of every key left being derived."""
        if not self.pushdown or member is E.EMPTY or not E.has_calls(member):
            return member
        rule = self._rules_by_body.get(member)
        if rule is None:
            suffix = "(other members)" if name is None else json_pointer(("properties", name))
            rule = Rule(json_pointer(path) + "/" + suffix.lstrip("/"), member)
            self._rules_by_body[member] = rule
        return E.call(rule)

    def _deferred_rule(self, name: str, build: Callable[[], E.Expr]) -> Rule:
        """A rule whose body ``build()`` makes when a request first enters it (or :meth:`complete`
        asks): one build at a time, under :attr:`build_budget`, lowering as at a value position
        (its own level, nothing else being lowered around it)."""
        rule = Rule(name)

        def builder() -> E.Expr:
            with self._build_lock:
                if rule.builder is None:  # built meanwhile by another thread
                    return rule._body
                saved = self.level, self.active_levels, self.pushdown, self.charged_level
                self.level, self.active_levels, self.pushdown, self.charged_level = 1, {}, True, -1
                try:
                    with self.build_budget():
                        body = build()
                except BaseException as exc:  # in a fill too: a named limit, as a compile's
                    if not stack_exhausted(exc):
                        raise
                    raise E.nested_too_deeply() from None
                finally:
                    self.level, self.active_levels, self.pushdown, self.charged_level = saved
                rule._body, rule.builder = body, None
                return body

        rule.builder = builder
        self._deferred.append(rule)
        return rule

    def other_members(self, excluded: list[str], value: E.Expr, path: tuple) -> E.Expr:
        """A member whose key is none of ``excluded`` (:func:`~grammask.grammars.fsm.json_text.string_not_in`)
        and whose value is ``value``: an object's other members. Where subschemas are lowered when
        reached, what follows the key's opening quote is a rule of its own, built when a request
        first reads past that quote. The trie of names is a large part of lowering a small object,
        and a first mask reads ``{"`` at most (no Llama-3.2 token goes on past it). The rule takes
        the colon and value too, so it is the member's last call: its caller's frame is popped when
        it is pushed, and a stack inside the key is as deep as before. Only where ``value`` is
        known to match something without building anything (a state calling the rule must know
        that the rule does)."""
        if not (self.deferred and self.pushdown and (value is self.any_value() or known_productive(value))):
            return E.cat(T.string_not_in(excluded), self.colon, value)
        key = (tuple(excluded), value)
        found = self._other_members.get(key)
        if found is None:
            rest = functools.partial(self.other_member_rest, key[0], value)
            rule = self._deferred_rule(json_pointer(path) + "/(other members after the quote)", rest)
            rule.productive = True  # every key but finitely many, then a value that matches something
            found = self._other_members[key] = E.cat(T.QUOTE, E.call(rule))
        return found

    def combined_schema(self, satisfied: list, failed: list) -> Any:
        """The schema of values valid under every schema of ``satisfied`` and under none of
        ``failed``. With calls: the one schema itself where that alone decides, else an ``allOf``
        of its own, the same object for the same schemas (by identity), so that :meth:`value`
        finds its rule."""
        kept = list({id(schema): schema for schema in satisfied if schema is not True and schema != {}}.values())
        if any(schema is False for schema in kept):
            return False
        if self.pushdown and len(kept) == 1 and not failed:
            return kept[0]
        key = (tuple(map(id, kept)), tuple(map(id, failed)))
        combined = self._combined_schemas.get(key) if self.pushdown else None
        if combined is None:
            combined = {"allOf": kept or [True]}
            if failed:
                combined["not"] = {"anyOf": failed}
            if self.pushdown:
                self._combined_schemas[key] = combined  # holds the schemas whose ids make the key
            else:
                # Inlined, each use is lowered where it stands, as a new schema (the budget counts
                # the levels of what it wraps): one object would be taken for a re-entry of the
                # schema being lowered further up, and a complement around it cut too early.
                self._merged_schemas.append(combined)  # memo keys hold ids: keep it alive
        return combined

    def both(self, a: Any, b: Any) -> Any:
        """The schema of values valid under ``a`` and ``b``, for merged object and array views: the
        one that alone decides (:func:`~grammask.grammars.fsm.merge.deciding_schema`), else one
        object per pair (:meth:`combined_schema`), so that recursion through merged members meets
        its rule."""
        decided = M.deciding_schema(a, b)
        return self.combined_schema([a, b], []) if decided is None else decided

    def other_member_rest(self, excluded: tuple[str, ...], value: E.Expr) -> E.Expr:
        """What follows an other member's opening quote (:meth:`other_members`): the rest of a key
        none of ``excluded``, the colon, ``value``."""
        return E.cat(T.string_rest_not_in(excluded), self.colon, value)

    def complete(self) -> tuple[tuple[Unenforced, ...], tuple[Unenforced, ...]]:
        """Build every deferred rule (those builds defer more: until none is left) and return
        ``(unenforced, narrowed)`` of the whole schema."""
        while self._deferred:
            pending, self._deferred = self._deferred, []
            for rule in pending:
                rule.body  # noqa: B018 - builds it
        return tuple(self.unenforced.values()), tuple(self.narrowed.values())

    @staticmethod
    def _calls_rule(body: E.Expr, rule: Rule) -> bool:
        """Whether ``body`` calls ``rule`` (a recursive rule's body must keep its own rule)."""
        return rule in E.called_rules(body)

    def loose(self, depth: int | None = None) -> E.Expr:
        """Some JSON value, any key order, nesting ≤ ``depth`` (default: deeper than anything the
        expression accepts). Only for helpers that must match every member or element."""
        depth = self.loose_depth if depth is None else depth
        if depth > MAX_NESTING:
            raise CompileLimitError("max_nesting", depth, MAX_NESTING, "schema nesting × (max_depth + 2)")
        for d in range(len(self._loose), depth + 1):
            member = E.cat(self.any_string, self.colon, self._loose[d - 1])
            array = self.list_text("[", "]", *self.open_list(self._loose[d - 1]))
            self._loose[d] = E.alt(self.scalars, array, self.object_text([], member))
        return self._loose[depth]

    def note_depth(self, path: tuple) -> None:
        if not any(k[0] == "max_depth" for k in self.narrowed):
            reason = f"values nested deeper than max_depth={self.spec.max_depth} are rejected"
            self.note("max_depth", path, reason, narrowing=True)

    def note(self, keyword: str, path: tuple, reason: str, *, narrowing: bool = False) -> None:
        """Record a keyword the expression does not enforce (or, ``narrowing``, enforces too strictly)."""
        key = (keyword, json_pointer(path))
        (self.narrowed if narrowing else self.unenforced).setdefault(key, Unenforced(keyword, key[1], reason))

    def universe(self, depth: int) -> E.Expr:
        """Every JSON value of nesting depth ≤ ``depth`` in the spec's canonical form."""
        if depth not in self._universes:
            inner = self.universe(depth - 1)
            array = self.list_text("[", "]", *self.open_list(inner))
            self._universes[depth] = E.alt(self.scalars, array, self.any_object(depth))
        return self._universes[depth]

    def any_object(self, depth: int) -> E.Expr:
        """Every object of nesting depth ≤ ``depth`` in the key order every object language of the
        spec accepts (DECLARED: ranked names once each, in rank order; unranked names anywhere).

        Unranked names may come anywhere, as in the object languages: were they forced last, a
        prefix with an unranked name first would be dead in a complement yet look alive, and
        proving it empty takes an exhaustive search."""
        if depth not in self._objects:
            self._objects[depth] = self._object_of(self.universe(depth - 1))
        return self._objects[depth]

    def _object_of(self, value: E.Expr) -> E.Expr:
        """:meth:`any_object` with member values ``value``."""
        if self.declared:
            slots = [([(T.string_then(k, E.cat(self.colon, value)), 0)], False) for k in self.rank]
            return self.interleaved_object(slots, E.cat(self.other_key, self.colon, value))
        return self.object_text([], E.cat(self.any_string, self.colon, value))

    # ------------------------------------------------------------------ list shapes

    def list_text(self, open_: str, close: str, nonempty: E.Expr, allow_empty: bool) -> E.Expr:
        """``open_ ws close`` (when ``allow_empty``) or ``open_ ws nonempty ws close``."""
        full = E.cat(E.literal(open_), self.ws, nonempty, self.ws, E.literal(close))
        return E.alt(E.cat(E.literal(open_), self.ws, E.literal(close)), full) if allow_empty else full

    def open_list(self, element: E.Expr) -> tuple[E.Expr, bool]:
        """A comma-separated run of one or more ``element`` (and: the empty run is allowed)."""
        return E.cat(element, E.star(E.cat(self.comma, element))), True

    def object_text(self, slots: list[tuple[E.Expr, bool]], extra: E.Expr) -> E.Expr:
        """An object whose members are ``slots`` in order (each optional unless flagged required),
        followed by any number of ``extra`` members."""
        rest = E.star(E.cat(self.comma, extra))
        first = E.cat(extra, rest)
        empty_ok = True
        for member, required in reversed(slots):
            new_rest = E.cat(self.comma, member, rest)
            new_first = E.cat(member, rest)
            if not required:
                new_rest = E.alt(new_rest, rest)
                new_first = E.alt(new_first, first)
            rest, first = new_rest, new_first
            empty_ok = empty_ok and not required
        return self.list_text("{", "}", first, empty_ok)

    def interleaved_object(
        self, slots: list[tuple[list[tuple[E.Expr, int]], bool]], other: E.Expr, allowed: Callable[[int], bool] | None = None,
        count: tuple[int, int | None] = (0, None),
    ) -> E.Expr:
        """An object whose members are ``slots`` in order (each optional unless flagged required),
        with any number of ``other`` members before, between and after them, and between
        ``count = (lo, hi)`` members in all.

        A slot is a list of ``(member, bits)`` alternatives: writing ``member`` sets ``bits``
        (member conditions, :mod:`~grammask.grammars.fsm.conditions`), and ``allowed(bits)``
        says whether an object whose members set ``bits`` may close; the chain carries the bits so
        far, and the members written while fewer than ``lo`` or at most ``hi`` (no intersection
        with a counted list, which would inline every value)."""
        allowed = allowed or (lambda bits: True)
        others = E.star(E.cat(self.comma, other))
        n = len(slots)
        rests: dict[tuple[int, int], E.Expr] = {}
        firsts: dict[tuple[int, int], E.Expr] = {}
        lo, hi = count

        def rest(i: int, bits: int) -> E.Expr:  # after a printed member: each next member comma-led
            key = (i, bits)
            if key not in rests:
                if i == n:
                    rests[key] = others if allowed(bits) else E.EMPTY
                else:
                    alternatives, required = slots[i]
                    here = E.alt(*(E.cat(others, self.comma, member, rest(i + 1, bits | more)) for member, more in alternatives))
                    rests[key] = here if required else E.alt(here, rest(i + 1, bits))
            return rests[key]

        def first(i: int, bits: int) -> E.Expr:  # a whole nonempty run
            key = (i, bits)
            if key not in firsts:
                if i == n:
                    firsts[key] = E.cat(other, others) if allowed(bits) else E.EMPTY
                else:
                    alternatives, required = slots[i]
                    options = [E.cat(member, rest(i + 1, bits | more)) for member, more in alternatives]
                    options.append(E.cat(other, rest(i, bits)))
                    if not required:
                        options.append(first(i + 1, bits))
                    firsts[key] = E.alt(*options)
            return firsts[key]

        for i in range(n, -1, -1):  # build from the end: the recursion stays shallow
            for bits in {0}:
                rest(i, bits), first(i, bits)
        empty_ok = all(not required for _, required in slots) and allowed(0) and lo == 0
        if lo == 0 and hi is None:
            return self.list_text("{", "}", first(0, 0), empty_ok)
        counted: dict[tuple[int, int, int], E.Expr] = {}

        def counted_rest(i: int, bits: int, written: int) -> E.Expr:  # rest() with ``written`` members so far
            if hi is None and written >= lo:
                return rest(i, bits)  # the count is met: nothing left to count
            key = (i, bits, written)
            if key not in counted:
                if hi is not None and written > hi:
                    counted[key] = E.EMPTY
                    return E.EMPTY
                options = [E.cat(self.comma, other, counted_rest(i, bits, written + 1))]
                if i == n:
                    options.append(E.EPS if allowed(bits) and written >= lo else E.EMPTY)
                else:
                    alternatives, required = slots[i]
                    options += [E.cat(self.comma, member, counted_rest(i + 1, bits | more, written + 1)) for member, more in alternatives]
                    if not required:
                        options.append(counted_rest(i + 1, bits, written))
                counted[key] = E.alt(*options)
            return counted[key]

        def counted_first(i: int, bits: int) -> E.Expr:  # first(), the first member counted
            options = [E.cat(other, counted_rest(i, bits, 1))]
            if i < n:
                alternatives, required = slots[i]
                options += [E.cat(member, counted_rest(i + 1, bits | more, 1)) for member, more in alternatives]
                if not required:
                    options.append(counted_first(i + 1, bits))
            return E.alt(*options)

        for i in range(n, -1, -1):
            counted_rest(i, 0, 1)
        return self.list_text("{", "}", counted_first(0, 0) if hi != 0 else E.EMPTY, empty_ok)

    def counted(self, element: E.Expr, lo: int, hi: int | None, open_: str, close: str, path: tuple) -> E.Expr:
        """A list of between ``lo`` and ``hi`` elements."""
        lo, hi = self.count_bounds(lo, hi, "maxItems" if open_ == "[" else "maxProperties", path)
        if hi == 0:
            return self.list_text(open_, close, E.EMPTY, True)
        tail = T.bounded_repeat(E.cat(self.comma, element), max(lo - 1, 0), None if hi is None else hi - 1)
        return self.list_text(open_, close, E.cat(element, tail), lo == 0)

    def items_text(self, prefix: list[E.Expr], rest: E.Expr, lo: int, hi: int | None, path: tuple) -> E.Expr:
        """An array whose item ``i`` is ``prefix[i]`` and every later item ``rest``, with between
        ``lo`` and ``hi`` items. The count is built into the chain of items (no intersection with
        a counted list, which would inline every item)."""
        lo, hi = self.count_bounds(lo, hi, "maxItems", path)
        if hi is not None and hi < lo:
            return E.EMPTY
        k = len(prefix)
        # tail: after i items, the comma-led rest of the array; built from the last prefix item back
        tail = T.bounded_repeat(E.cat(self.comma, rest), max(lo - k, 0), None if hi is None else max(hi - k, 0))
        for i in range(k - 1, 0, -1):
            options = [E.EPS] if i >= lo else []
            if hi is None or i < hi:
                options.append(E.cat(self.comma, prefix[i], tail))
            tail = E.alt(*options)
        if k:
            first = E.cat(prefix[0], tail)
        else:
            first = E.cat(rest, T.bounded_repeat(E.cat(self.comma, rest), max(lo - 1, 0), None if hi is None else hi - 1))
        return self.list_text("[", "]", first if hi != 0 else E.EMPTY, lo == 0)

    def count_bounds(self, lo: int, hi: int | None, keyword: str, path: tuple) -> tuple[int, int | None]:
        """``(lo, hi)`` within :data:`MAX_REPEAT`: a larger ``hi`` is dropped and noted."""
        if lo > MAX_REPEAT:
            raise CompileLimitError("max_repeat", lo, MAX_REPEAT, f"lower bound at '{json_pointer(path)}'")
        if hi is not None and hi > MAX_REPEAT:
            self.note(keyword, path, f"upper bound {hi} above {MAX_REPEAT} is not enforced")
            hi = None
        return lo, hi

    # ------------------------------------------------------------------ schemas

    def lower(
        self, schema: Any, depth: int, base: str, path: tuple, context: frozenset[str] = BASIC_TYPES, names: frozenset[str] = frozenset()
    ) -> E.Expr:
        """Valid(schema) ∩ (what the policy writes), with ``depth`` the recursion budget.

        Invariant: Valid ∩ universe(depth) ⊆ result ⊆ Valid, for values of a type in ``context``
        (the types an enclosing schema of the same value allows; that schema intersects its own
        type part, so values of other types never get through). Entering a schema that is already
        being lowered further up (recursion through ``$ref``) costs one unit of budget, once per
        container level; below zero, containers are cut. So a value nested at most ``depth``
        levels below is never cut, which is what makes complements within ``universe(depth)``
        exact. ``names`` are the property names the object languages of this
        value give slots to besides their own (:meth:`location_names`).
        """
        if schema is True:
            return self.free(path)
        if schema is False:
            return E.EMPTY
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"a schema is an object or a boolean, got {type(schema).__name__}", json_pointer(path))
        ident = (id(schema), base)
        entered_at = self.active_levels.get(ident)
        charged = False
        if entered_at is not None:
            if entered_at == self.level:
                raise UnsupportedFeatureError("$ref", json_pointer(path), "fsm", "a reference cycle that never descends into a value")
            # With calls, the value position that closes the cycle calls the rule. Inlined, the
            # budget counts levels: a cycle through several schemas re-enters each of them there.
            charged = not self.pushdown and self.charged_level != self.level
            if charged:
                depth -= 1
                self.note_depth(path)
        key = (id(schema), depth, base, context, names, self.pushdown)
        done = self.memo.get(key)
        if done is not None:
            return done
        self.steps += 1
        if self.steps > MAX_SUBSCHEMA_LOWERINGS:
            raise CompileLimitError("max_subschemas", self.steps, MAX_SUBSCHEMA_LOWERINGS)
        budget = E.current_budget()
        if budget is not None:
            budget.check_clock("while lowering subschemas")  # a lowering may build no new node
        self.active_levels[ident] = self.level
        charged_level = self.charged_level
        if charged:
            self.charged_level = self.level
        try:
            base = self.resolver.base_of(schema, base)
            result = self._checked_literals(schema, base)
            if result is None:
                result = self._lower_either_way(normalize_keywords(schema, self.draft), depth, base, path, context, names)
        finally:
            self.charged_level = charged_level
            if entered_at is None:
                del self.active_levels[ident]
            else:
                self.active_levels[ident] = entered_at
        self.memo[key] = result
        return result

    def _checked_literals(self, schema: dict, base: str) -> E.Expr | None:
        """A schema with ``enum`` / ``const`` (its own or an ``allOf`` branch's) allows a finite
        list of values: exactly those ``jsonschema`` validates against the whole schema, written
        as literals, with no intersection or complement left to take. Only where that verdict is
        this lowering's own: no dynamic reference, no format asserted, no ``multipleOf`` (floats),
        in the schema or what its references reach, and every reference within the root resource
        (the validator resolves them against the document's root)."""
        candidates = literals(schema)
        branches = schema.get("allOf") if isinstance(schema.get("allOf"), list) else ()
        for branch in branches:
            candidates = candidates if candidates is not None else literals(branch)
        if candidates is None or len(candidates) > MAX_CHECKED_LITERALS:
            return None
        reached = self._referenced_closure(schema, base)
        if reached is None:
            return None
        unchecked = ['"$dynamicRef"', '"$recursiveRef"', '"multipleOf"'] + (['"format"'] if self.assert_formats else [])
        for part in reached:
            text = json.dumps(part)
            if any(keyword in text for keyword in unchecked):
                return None
        verdicts = [self.prover.verdict(schema, value) for value in candidates]
        if None in verdicts:
            return None
        return E.alt(*(self.literal(value) for value, valid in zip(candidates, verdicts) if valid))

    def _referenced_closure(self, schema: dict, base: str) -> list | None:
        """``schema`` and every schema its ``$ref`` s reach (transitively), or ``None`` when one of
        them lies outside the root resource (another base URI) or cannot be resolved."""
        root_base = self.resolver.root_base
        if base != root_base:
            return None
        reached, seen, pending = [], set(), [schema]
        while pending:
            part = pending.pop()
            if id(part) in seen:
                continue
            seen.add(id(part))
            reached.append(part)
            for _, sub in subschemas(part):
                if not isinstance(sub, dict):
                    continue
                if self.resolver.base_of(sub, root_base) != root_base:
                    return None
                ref = sub.get("$ref")
                if ref is None:
                    continue
                try:
                    target = self.resolver.resolve(ref, root_base) if isinstance(ref, str) else None
                except (UnsupportedFeatureError, InvalidSchemaError):
                    return None
                if target is None or target.base != root_base:
                    return None
                pending.append(target.schema)
        return reached

    def _lower_either_way(self, s: dict, depth: int, base: str, path: tuple, context: frozenset[str], names: frozenset[str]) -> E.Expr:
        """:meth:`_lower_object_schema` with calls at value positions; where this schema needs ∩ or
        ¬ over whole values (``not``, overlapping ``oneOf``, ``allOf`` of containers…), again with
        every value inlined (exact algebra, recursion and free values unrolled to ``max_depth``)."""
        folded = _absence_folded(s)
        if folded is False:
            return E.EMPTY
        if folded is not s:
            self._merged_schemas.append(folded)  # memo keys hold ids: keep the new schemas alive
            s = folded
        if not self.pushdown:
            return self._lower_object_schema(s, depth, base, path, context, names)
        merged = self._merged_applicators(s, base, path, context)
        if merged is not None:
            self._merged_schemas.append(merged)  # memo keys hold ids: keep the new schemas alive
            s = merged
        notes = dict(self.unenforced), dict(self.narrowed)
        try:
            return self._lower_object_schema(s, depth, base, path, context, names)
        except E.CallsUnderAlgebraError:
            self.unenforced, self.narrowed = notes
        # Inlined, only what this value re-enters costs depth: a schema being lowered further up
        # with calls is entered here for the first time (charging it would cut one level inside
        # a complement that the universe bounding it still holds: a false accept).
        active = self.active_levels
        self.pushdown, self.active_levels = False, {k: v for k, v in active.items() if v == self.level}
        try:
            return self._lower_object_schema(s, depth, base, path, context, names)
        finally:
            self.pushdown, self.active_levels = True, active

    def _merged_applicators(self, s: dict, base: str, path: tuple, context: frozenset[str]) -> dict | None:
        """``s`` with its ``allOf`` / ``anyOf`` / disjoint ``oneOf`` merged into object schemas
        (:mod:`~grammask.grammars.fsm.merge`), nested ones too, when ``s`` is an object schema and
        every branch a mergeable one; else ``None``. The result has no intersection left to take."""
        if not any(k in s for k in _CONDITION_KEYWORDS) and not ("$ref" in s and not _is_plain_ref(s)):
            return None
        if "unevaluatedProperties" in s:
            s = self._unevaluated_as_additional(s, base, path) or s
        merged_conditions = self._merged_conditions
        views = self._object_views(s, base, path, context)
        if views is not None and self._merged_conditions > merged_conditions:
            # Member conditions take an if / then / else without complementing its values, and
            # dependencies without a product of views.
            conditioned = self._conditioned(s, base, path, context)
            if conditioned is not None:
                return conditioned
        if views is not None:
            return _any_of([M.view_to_schema(v) for v in views])
        arrays = self._array_views(s, base, path)
        if arrays is not None:
            return _any_of([M.array_view_to_schema(v) for v in arrays])
        return self._conditioned(s, base, path, context)

    def _array_views(self, schema: Any, base: str, path: tuple, seen: int = 0) -> list[dict] | None:
        """The array views (:func:`~grammask.grammars.fsm.merge.array_view`) whose union is
        ``schema``, its ``allOf`` merged, its ``not`` merged as the views of what that rejects
        (:meth:`_rejected_array_views`), nested ones and plain references within the document
        scope followed; at most :data:`MAX_MERGED_VIEWS`. ``None`` when some part is not an
        array schema or has another applicator."""
        schema = self._plain_target(schema, base, path)
        if schema is None or seen > 8:
            return None
        if not isinstance(schema, dict):
            view = M.array_view(schema)
            return None if view is None else [view]
        schema = normalize_keywords(schema, self.draft)
        view = M.array_view({k: v for k, v in schema.items() if k not in ("allOf", "not")})
        branches = schema.get("allOf", [])
        if view is None or not isinstance(branches, list):
            return None
        views = [view]
        parts = [self._rejected_array_views(schema["not"], base, path)] if "not" in schema else []
        parts += [self._array_views(branch, base, path, seen + 1) for branch in branches]
        for found in parts:
            if found is None or len(views) * len(found) > MAX_MERGED_VIEWS:
                return None
            views = [self._merged_arrays(a, b) for a in views for b in found]
            if None in views:
                return None
        return views

    def _merged_arrays(self, a: dict, b: dict) -> dict | None:
        """:func:`~grammask.grammars.fsm.merge.merge_array_views` of ``a`` and ``b``, each view's
        ``contains`` first settled against the other's items (:meth:`_contains_settled`), so
        that two views with one each still merge where one of them is a count."""
        return M.merge_array_views(self._contains_settled(a, b["items"]), self._contains_settled(b, a["items"]), self.both)

    def _contains_settled(self, view: dict, items: Any) -> dict:
        """``view`` with its ``contains`` (without ``maxContains``) made a least count of items
        where every value ``items`` allows satisfies it (by type: ``not`` of an object schema
        beside items that are strings), for arrays whose items ``items`` also bounds."""
        if view["contains"] is None or view["contains"][2] is not None or not isinstance(items, dict):
            return view
        contains, fewest, _ = view["contains"]
        types = _declared_types(normalize_keywords(items, self.draft))
        if types is None or not all(_accepts_every(contains, kind, self.draft) for kind in types):
            return view
        return {**view, "min": max(view["min"], fewest), "contains": None}

    def _rejected_array_views(self, schema: Any, base: str, path: tuple, kind: str | None = None) -> list[dict] | None:
        """The values ``schema`` rejects as a union of array views, where ``schema`` (through
        plain references and one-branch applicators) is an array view of any type (its other
        types' values then pass it) or of arrays alone (then every other value fails it): the
        arrays with too few or too many items, with an item ``items`` rejects (``contains`` its
        complement), with too few or too many items ``contains`` accepts. ``None`` for another
        schema. Kept per schema, so their lowerings are memoised. With ``kind`` ``"array"``,
        only the arrays of the views count (:meth:`_per_target`)."""
        return self._per_target(self._rejected_arrays, schema, base, path, self._array_failures, kind)

    def _per_target(self, cache: dict, schema: Any, base: str, path: tuple, build: Callable[[dict], Any], kind: str | None = None) -> Any:
        """``build`` of ``schema``'s target (through :meth:`_lone_branch`, normalized; ``None``
        where it is no schema object), kept in ``cache`` by the target's id (the cache holds the
        target): the schemas a build makes are then the same objects, and their lowerings memoised.
        With ``kind``, for a caller that keeps values of that type only: the target without the
        keywords that constrain other types (what it says of ``kind``'s values is all there is)."""
        target = self._lone_branch(schema, base, path)
        known = cache.get((id(target), kind))
        if known is None:
            normalized = normalize_keywords(target, self.draft) if isinstance(target, dict) else None
            if normalized is not None and kind is not None:
                normalized = {k: v for k, v in normalized.items() if _CONSTRAINED_TYPE.get(k, kind) == kind}
            known = cache[(id(target), kind)] = (target, None if normalized is None else build(normalized))
        return known[1]

    def _array_failures(self, s: dict) -> list[dict] | None:
        """:meth:`_rejected_array_views` of ``s`` (normalized)."""
        declared = _declared_types(s, absent=BASIC_TYPES)
        if declared is None or ("number" in declared and "number" not in _types_named(s.get("type", "number"))):
            return None  # (no type set holds the numbers an integer type rejects)
        # Each view holds the values of every other type ``s`` rejects, and arrays.
        rejected = BASIC_TYPES - declared - {"array"}
        types = None if rejected == BASIC_TYPES - {"array"} else rejected | {"array"}
        arrays = lambda **keywords: {"types": types, "items": True, "min": 0, "max": None, "contains": None, **keywords}  # noqa: E731
        view = M.array_view({**s, "type": "array"})  # (no keyword of another type)
        if view is None or not _counts_within_repeat(view["min"], view["max"]):
            return None
        if "array" not in declared:
            return [arrays()]
        failures = [arrays(max=view["min"] - 1)] if view["min"] > 0 else []
        failures += [arrays(min=view["max"] + 1)] if view["max"] is not None else []
        if not _allows_anything(view["items"]):
            failures.append(arrays(contains=(self.combined_schema([], [view["items"]]), 1, None)))
        if view["contains"] is not None:
            contains, fewest, most = view["contains"]
            if max(fewest, most or 0) >= MAX_CONTAINS:
                return None
            failures += [arrays(contains=(contains, 0, fewest - 1))] if fewest > 0 else []
            failures += [arrays(contains=(contains, most + 1, None))] if most is not None else []
        if not failures and types != {"array"}:
            failures.append(arrays(min=1, max=0))  # the other types' values, and no array
        return failures

    def _plain_target(self, schema: Any, base: str, path: tuple) -> Any:
        """``schema``, or what its plain ``$ref`` (nothing beside it but annotations) leads to,
        followed within the same base URI; ``None`` where one leads elsewhere."""
        for _ in range(32):
            if not _is_plain_ref(schema):
                return schema
            target = self.resolver.resolve(schema["$ref"], base, path)
            if target.base != base:
                return None
            schema = target.schema
        return None

    def _conditioned(self, s: dict, base: str, path: tuple, context: frozenset[str]) -> dict | None:
        """``s`` as one object schema whose member conditions its slot chain tracks
        (:data:`CONDITION`), when every in-place keyword is such a condition or an ``allOf``
        branch that merges as an object schema; else ``None``. The value's other types are
        kept where the conditions hold for every value of the type, dropped where they hold
        for none (``oneOf`` of two ``required`` lists allows objects only)."""
        if not self.declared or not isinstance(s.get("allOf", []), list):
            return None
        outer = self._object_views({k: v for k, v in s.items() if k not in _CONDITION_KEYWORDS}, base, path, context, whole=False)
        if outer is None or len(outer) != 1:
            return None
        view, formulas = outer[0], []
        reader = C.ConditionReader(self._resolve_in_document, self.draft)
        for branch in s.get("allOf", []):
            branch_views = self._object_views(branch, base, path, context)
            if branch_views is not None and len(branch_views) == 1:
                view = M.merge_views(view, branch_views[0], self.both)
            else:
                formulas.append(reader.read(branch, base, path))
        formulas.append(reader.read({k: v for k, v in s.items() if k in _CONDITION_KEYWORDS and k != "allOf"}, base, path))
        if any(f is None for f in formulas):
            return None
        formula = C.all_of(formulas)
        bits = C.ConditionBits(formula)
        if not bits.trackable or not all(name in self.rank for name in bits.names):
            return None
        others = [t for t in view["types"] or context if basic_type(t) != "object" and basic_type(t) in context]
        verdicts = {t: C.holds_for_type(formula, basic_type(t)) for t in others}
        if None in verdicts.values():
            return None
        types = {"object", *(t for t, holds in verdicts.items() if holds)}
        merged = M.view_to_schema({**view, "types": types})
        merged[CONDITION] = (formula, reader.value_schemas)
        return merged

    def _resolve_in_document(self, ref: str, base: str, path: tuple) -> tuple[Any, str | None]:
        """``(schema, base)`` of a reference; ``(None, None)`` where it cannot be resolved here."""
        try:
            target = self.resolver.resolve(ref, base, path)
        except (InvalidSchemaError, UnsupportedFeatureError):
            return None, None
        return target.schema, target.base

    def _object_views(
        self, schema: Any, base: str, path: tuple, context: frozenset[str], seen: int = 0, whole: bool = True
    ) -> list[dict] | None:
        """Object views (:func:`~grammask.grammars.fsm.merge.object_view`) whose union is
        ``schema``'s language, its applicators distributed (``allOf`` merged, ``anyOf`` and
        disjoint ``oneOf`` alternatives), at most :data:`MAX_MERGED_VIEWS` of them; ``None`` when
        some part is not an object schema, a ``oneOf`` overlaps, or a ``$ref`` leaves the
        document scope. A branch's ``unevaluatedProperties`` is said by view keywords first
        (:meth:`_unevaluated_as_additional`); so is ``schema``'s unless ``whole`` is false (a
        part of a schema, whose other keywords evaluate names too)."""
        schema = self._plain_target(schema, base, path)
        if schema is None:
            return None
        if not isinstance(schema, dict) or seen > 8:
            view = M.object_view(schema) if seen <= 8 else None
            return None if view is None else [view]
        schema = _absence_folded(normalize_keywords(schema, self.draft))
        if schema is False:
            return None
        if whole and "unevaluatedProperties" in schema and "$id" not in schema and "id" not in schema:
            # (a base URI of its own would resolve the references it evaluates through elsewhere)
            schema = self._unevaluated_as_additional(schema, base, path) or schema
        outer = M.object_view({k: v for k, v in schema.items() if k not in _CONDITION_KEYWORDS and k != "$ref"})
        dependents = _dependent_alternatives(schema)
        if outer is None or dependents is None or ("$ref" in schema and "$id" in schema):
            return None
        if self.declared and not all(name in self.rank for name in schema.get("dependentSchemas", {})):
            return None  # a name only dependentSchemas mentions has no place in the declared order
        context = context & _basic_types(outer["types"])  # the value's own type holds in every branch
        views = [outer]
        parts = [[branch] for branch in schema.get("allOf", ())] + dependents
        if "$ref" in schema:  # beside other keywords (2019-09 on), one more part that always applies
            parts.append([{"$ref": schema["$ref"]}])
        self._merged_conditions += len(dependents)
        if "not" in schema:
            rejected = self._rejected_objects(schema["not"], base, path, _basic_types(outer["types"]))
            if rejected is None:
                return None
            parts.append(rejected)
        if "if" in schema:  # (the condition and then) or (a way to fail the condition and else)
            failed = self._rejected_objects(schema["if"], base, path, _basic_types(outer["types"]))
            if failed is None:
                return None
            then, else_ = schema.get("then", True), schema.get("else", True)
            self._merged_conditions += 1
            parts.append([self.combined_schema([schema["if"], then], [])] + [self.combined_schema([f, else_], []) for f in failed])
        if "anyOf" in schema:
            parts.append(schema["anyOf"])
        objects_only = False  # oneOf's branches overlap on other types only
        if "oneOf" in schema:
            if not self.prover.disjoint(schema["oneOf"], base, context, schema):
                objects_only = "object" in context and self.prover.disjoint(schema["oneOf"], base, frozenset({"object"}), schema)
                if not objects_only:
                    return None
            parts.append(schema["oneOf"])
        for alternatives in parts:
            per_branch = [self._object_views(branch, base, path, context, seen + 1) for branch in alternatives]
            if None in per_branch:
                return None
            found = [view for branch_views in per_branch for view in branch_views]
            if objects_only and alternatives is schema["oneOf"]:
                # An object view says nothing of the other types it allows: a value of one
                # satisfies every branch with a view that allows its type, and two of them fail
                # the oneOf.
                held = [frozenset().union(*(_type_classes(view["types"]) for view in branch_views)) for branch_views in per_branch]
                shared = {c for c in _TYPE_CLASSES - {"object"} if sum(c in classes for classes in held) > 1}
                found = [{**view, "types": _types_of_classes(_type_classes(view["types"]) - shared)} for view in found]
                if any(view["types"] is None for view in found):
                    return None
            views = [M.merge_views(a, b, self.both) for a in views for b in found]
            if len(views) > MAX_MERGED_VIEWS:
                return None
        return views

    def _unevaluated_as_additional(self, schema: dict, base: str, path: tuple) -> dict | None:
        """The whole schema ``schema`` with its ``unevaluatedProperties`` said by the keywords of
        an object view: every name that it or its ``allOf`` / ``$ref`` subschemas evaluate
        (:meth:`evaluated`) a property of its own (``true`` where it has none), the unevaluated
        schema for the other names. Exact, as those subschemas always apply: a member of an
        evaluated name meets their schemas in the merge, any other name only the unevaluated
        schema. ``None`` where they evaluate patterns, or an applicator whose annotations depend
        on a branch is in the way. (Not for a part of a schema: what its other applicators
        evaluate would be missed.)"""
        rest = {k: v for k, v in schema.items() if k != "unevaluatedProperties"}
        if "additionalProperties" in schema:
            return rest  # it evaluates every name itself
        try:
            evaluated = self.evaluated(schema, base, path, "unevaluatedProperties")
        except UnsupportedFeatureError:
            return None  # reported where the schema is lowered
        if evaluated is True:
            return rest
        names, patterns = evaluated
        properties = schema.get("properties", {})
        if patterns or not isinstance(properties, dict):
            return None
        return {**rest, "properties": {**{name: True for name in names}, **properties}, "additionalProperties": schema["unevaluatedProperties"]}

    def _rejected_objects(self, schema: Any, base: str, path: tuple, allowed: frozenset[str]) -> list[dict] | None:
        """The object schemas whose union is what ``schema`` rejects, where every way to fail it
        has one (:meth:`_failures_of`: a required name absent, a member's value invalid) and it
        accepts every value of the other types of ``allowed`` (those the schema beside it allows);
        else ``None``."""
        schemas, failures, declared = self._failures_of(schema, base, path)
        if failures is None or any(kind in ("extra", "named") for kind, _ in failures):
            return None
        if declared is None or not allowed - {"object"} <= declared:
            return None
        return schemas

    def child(self, schema: Any, depth: int, base: str, path: tuple) -> E.Expr:
        """Lower a schema that applies one container level down (an item or a member value)."""
        if self.pushdown:
            return self.value(schema, depth, base, path)
        self.level += 1
        try:
            return self.lower(schema, depth, base, path)
        finally:
            self.level -= 1

    def bounded(self, depth: int, path: tuple) -> E.Expr:
        """Where complements are exact: universe(depth) under recursion (a cut can come after
        depth + 1 unrolls), so noted; otherwise every canonical value, at any depth (the
        free-value rule: its values are read only where a part looks inside them)."""
        if not self.recursive and self.free_calls:
            return self.free_value_call
        self.note_depth(path)
        return self.universe(max(depth, 0) if self.recursive else self.free_depth)

    def _not_by_type(self, schema: Any, negated: E.Expr, context: frozenset[str], depth: int, base: str, path: tuple) -> E.Expr | None:
        """``not`` taken type by type, where that needs no complement of a value with calls: a
        type ``negated`` (the language of ``schema``) has no value of is free, one ``schema``
        accepts whole is out, the values of a scalar type are complemented by automaton
        algebra, and arrays and objects by their structure (:meth:`_arrays_rejected`,
        :meth:`_objects_rejected`). ``None`` where a container type needs more."""
        schema = normalize_keywords(schema, self.draft) if isinstance(schema, dict) else schema
        out = []
        for kind in sorted(context):
            first = _FIRST_BYTES[kind]
            piece = _starting_with(negated, first)
            if piece is None:
                return None
            if piece is E.EMPTY:
                out.append(self.any_of_type(first))
            elif _accepts_every(schema, kind, self.draft):
                continue
            elif kind in _SCALAR_TYPES and not E.has_calls(piece):
                out.append(E.diff(self.any_of_type(first), piece))
            elif kind == "array" and (rejected := self._arrays_rejected(schema, depth, base, path)) is not None:
                out.append(rejected)
            elif kind == "object" and (rejected := self._objects_rejected(schema, depth, base, path)) is not None:
                out.append(rejected)
            else:
                return None
        return E.alt(*out)

    def _arrays_rejected(self, schema: Any, depth: int, base: str, path: tuple) -> E.Expr | None:
        """The arrays ``schema`` rejects, with calls at their items: each array view of
        :meth:`_rejected_array_views` lowered as a schema of its own (its items counted one by
        one, :meth:`_items_containing`). ``None`` for another schema."""
        views = self._rejected_array_views(schema, base, path, "array")
        if views is None:
            return None
        schemas = [M.array_view_to_schema(view) for view in views]
        self._merged_schemas.extend(schemas)  # memo keys hold ids: keep the new schemas alive
        return E.alt(*(self.lower(x, depth, base, path + ("not",), frozenset({"array"})) for x in schemas))

    def _objects_rejected(self, schema: Any, depth: int, base: str, path: tuple) -> E.Expr | None:
        """The objects ``schema`` rejects, with calls at their values, where ``schema`` (through
        plain references and one-branch applicators) constrains objects by ``properties``,
        ``required``, ``minProperties``, ``maxProperties``, ``additionalProperties: false`` and
        ``patternProperties`` that forbid or allow every value only: one object language per way
        to fail it (:meth:`_object_failures`), each lowered as a schema of its own, or for a name
        outside ``properties`` and the patterns or a name a pattern forbids, an object with such
        a member (:meth:`_has`). ``None`` for another schema."""
        schemas, failures, _ = self._failures_of(schema, base, path, "object")
        if failures is None:
            return None
        rejected = [self.lower(failure, depth, base, path + ("not",), frozenset({"object"})) for failure in schemas]
        for kind, detail in failures:
            if kind == "extra":
                rejected.append(self._object_with_a_name_outside(*detail, path + ("not",)))
            elif kind == "named":
                rejected.append(self._has(E.cat(self.key_pattern(detail, path + ("not",)), self.colon, self.any_value()), called=True))
        return E.alt(*rejected)

    def _failures_of(
        self, schema: Any, base: str, path: tuple, kind: str | None = None
    ) -> tuple[list[dict], list[tuple[str, Any]] | None, frozenset[str] | None]:
        """``(schemas, failures, declared)``: the ways to fail ``schema`` (through
        :meth:`_lone_branch`; :meth:`_object_failures`, ``None`` for another schema), the object
        schemas of those that have one, and the basic types it declares (:meth:`_per_target`;
        ``kind`` ``"object"`` for a caller that keeps objects only)."""
        return self._per_target(self._failure_schemas, schema, base, path, self._failure_parts, kind) or ([], None, None)

    def _failure_parts(self, s: dict) -> tuple[list[dict], list[tuple[str, Any]] | None, frozenset[str] | None]:
        """:meth:`_failures_of` of ``s`` (normalized)."""
        failures = self._object_failures(s)
        schemas = [] if failures is None else [self._failure_schema(f) for f in failures if f[0] not in ("extra", "named")]
        return schemas, failures, _declared_types(s, absent=BASIC_TYPES)

    def _object_with_a_name_outside(self, names: tuple[str, ...], patterns: tuple[str, ...], path: tuple) -> E.Expr:
        """Every object with a member whose name is none of ``names`` and matches none of
        ``patterns``: what ``additionalProperties: false`` beside them rejects."""
        keys = T.string_not_in(names)
        if patterns:
            keys = E.diff(keys, E.alt(*(self.key_pattern(pattern, path) for pattern in patterns)))
        return self._has(E.cat(keys, self.colon, self.any_value()), called=True)

    def _object_failures(self, s: dict) -> list[tuple[str, Any]] | None:
        """The ways an object fails ``s`` (see :meth:`_objects_rejected`): ``("absent", name)``
        of a required name, ``("invalid", (name, schema))`` of a named member whose value
        ``schema`` rejects, ``("fewer", n)`` / ``("more", n)`` members than the bounds allow
        (``n`` the nearest count out of them), ``("extra", (names, patterns))`` a member named
        none of the ``properties`` and matching none of the ``patternProperties`` under
        ``additionalProperties: false``, ``("named", pattern)`` a member whose name matches a
        pattern whose schema is ``false`` (a pattern's other schema must allow every value). ``None`` where ``s`` has another
        assertion, or another ``additionalProperties`` than ``false`` or one that allows every value."""
        if any(k not in _OBJECT_FAILURE_KEYWORDS and not M.is_annotation(k) for k in s):
            return None
        declared = _declared_types(s, absent=BASIC_TYPES)
        properties, required = s.get("properties", {}), s.get("required", [])
        patterns = s.get("patternProperties", {})
        lo, hi = s.get("minProperties", 0), s.get("maxProperties")
        if (
            declared is None or "object" not in declared
            or not (s.get("additionalProperties", True) is False or _allows_anything(s.get("additionalProperties", True)))
            or not isinstance(properties, dict) or not all(isinstance(v, (bool, dict)) for v in properties.values())
            or not isinstance(required, list) or not all(isinstance(n, str) for n in required)
            or not isinstance(patterns, dict) or not all(_allows_anything(v) or _allows_nothing(v) for v in patterns.values())
            or not _counts_within_repeat(lo, hi)
        ):
            return None
        failures: list[tuple[str, Any]] = [("absent", name) for name in dict.fromkeys(required)]
        failures += [("invalid", (name, value)) for name, value in properties.items() if not _allows_anything(value)]
        failures += [("fewer", lo - 1)] if lo > 0 else []
        failures += [("more", hi + 1)] if hi is not None else []
        failures += [("named", pattern) for pattern, value in patterns.items() if _allows_nothing(value)]
        failures += [("extra", (tuple(properties), tuple(patterns)))] if s.get("additionalProperties", True) is False else []
        return failures

    def _failure_schema(self, failure: tuple[str, Any]) -> dict:
        """The object schema of one way to fail (:meth:`_object_failures`)."""
        kind, detail = failure
        if kind == "absent":
            return {"type": "object", "properties": {detail: False}}
        if kind == "invalid":
            name, value = detail
            return {"type": "object", "required": [name], "properties": {name: self.combined_schema([], [value])}}
        if kind == "present":
            return {"type": "object", "required": [detail]}
        if kind == "unmet":
            name, value = detail
            return {"type": "object", "properties": {name: self.combined_schema([], [value])}}
        return {"type": "object", "maxProperties" if kind == "fewer" else "minProperties": detail}

    def _objects_in_one_branch(self, branches: list, depth: int, base: str, path: tuple) -> E.Expr | None:
        """The objects exactly one of ``branches`` (``oneOf`` branches that hold objects)
        accepts, where each is one mergeable object schema (:meth:`_object_views`: plain
        references and ``allOf`` followed) whose failures are known (:meth:`_object_failures`):
        per branch, its view merged with one way to fail each other branch, every choice of them
        one merged object schema, so no complement of a value with calls is taken (a failed
        member's value is its schema's complement, lowered as a value of its own). Choices that
        cannot hold (a required name absent, a value both valid and not) are left out. ``None``
        for another branch, or past :data:`MAX_EXCLUSIVE_VIEWS` merged schemas or
        :data:`MAX_EXCLUSIVE_MEMBERS` members in them."""
        views, failures = [], []
        for branch in branches:
            found = self._object_views(branch, base, path, frozenset({"object"}))
            if found is None or len(found) != 1:
                return None
            views.append({**found[0], "types": {"object"}})
        views = _with_shared_values(views)
        for view in views:
            failed = self._object_failures(M.view_to_schema(view))
            if failed is None or any(kind in ("fewer", "more") for kind, _ in failed):
                return None
            failures.append(failed)
        chosen: list[dict] = []
        members = 0
        for i, view in enumerate(views):
            others = [self._failures_within(view, failures[j], base) for j in range(len(views)) if j != i]
            if None in others:
                return None
            if math.prod(map(len, others)) + len(chosen) > MAX_EXCLUSIVE_VIEWS:
                return None
            for choice in itertools.product(*others):
                merged = view
                for failure in choice:
                    if failure[0] != "always":
                        merged = M.merge_views(merged, M.object_view(self._failure_schema(failure)), self.both)
                members += len(merged["properties"])
                if members > MAX_EXCLUSIVE_MEMBERS:
                    return None
                chosen.append(M.view_to_schema(merged))
        self._merged_schemas.extend(chosen)  # memo keys hold ids: keep the new schemas alive
        return E.alt(*(self.lower(x, depth, base, path + ("oneOf",), frozenset({"object"})) for x in chosen))

    def _arrays_in_one_branch(self, branches: list, depth: int, base: str, path: tuple) -> E.Expr | None:
        """The arrays exactly one of ``branches`` (``oneOf`` branches that hold arrays) accepts,
        where each is a union of array views (:meth:`_array_views`) and what each rejects is
        (:meth:`_rejected_array_views`): per view of a branch, the view merged with one way to
        fail each other branch, every choice of them one array schema, so no complement of an
        item with calls is taken. ``None`` for another branch, or past
        :data:`MAX_EXCLUSIVE_VIEWS` merged schemas."""
        views = [self._array_views(branch, base, path) for branch in branches]
        failures = [self._rejected_array_views(branch, base, path) for branch in branches]
        if any(found is None for found in views + failures):
            return None
        chosen: list[dict] = []
        for i, branch_views in enumerate(views):
            others = [failures[j] for j in range(len(branches)) if j != i]
            if len(branch_views) * math.prod(map(len, others)) + len(chosen) > MAX_EXCLUSIVE_VIEWS:
                return None
            for view, choice in itertools.product(branch_views, itertools.product(*others)):
                merged: dict | None = {**view, "types": {"array"}}
                for failure in choice:
                    merged = M.merge_array_views(merged, failure, self.both)
                    if merged is None:
                        return None
                chosen.append(M.array_view_to_schema(merged))
        self._merged_schemas.extend(chosen)  # memo keys hold ids: keep the new schemas alive
        return E.alt(*(self.lower(x, depth, base, path + ("oneOf",), frozenset({"array"})) for x in chosen))

    def _failures_within(self, view: dict, failures: list[tuple[str, Any]], base: str) -> list[tuple[str, Any]] | None:
        """The ``failures`` of another schema (:meth:`_object_failures`) an object of the object
        ``view`` can have, each one an object schema to merge. ``[("always", None)]`` where every
        object of the view has one (a name the view forbids required there, a name the view
        requires outside the other's closed ``properties``, a required member's values the prover
        shows disjoint): the other branch needs no merge. Left out: a name the view requires
        being absent, a value whose schema is the view's own or one the view forbids. A name
        outside the other's ``properties`` is one of the view's own names present, where the
        view allows no other; ``None`` where it does (no object schema says "some other name").
        A name that can still be absent or invalid is one way to fail (:func:`_unmet_members`)."""
        own = lambda name: view["properties"].get(name, view["additional"])  # noqa: E731
        out: list[tuple[str, Any]] = []
        for kind, detail in failures:
            if kind == "absent":
                if own(detail) is False:
                    return [("always", None)]
                if detail not in view["required"]:
                    out.append((kind, detail))
            elif kind == "invalid":
                name, value = detail
                if own(name) is False or own(name) == value:
                    continue
                if name in view["required"] and self.prover.disjoint([own(name), value], base, set(BASIC_TYPES)):
                    return [("always", None)]
                out.append((kind, detail))
            elif kind == "named" or (kind == "extra" and detail[1]):
                return None  # no object schema says "a name of a pattern"
            elif kind == "extra":
                names = detail[0]
                if any(name not in names and own(name) is not False for name in view["required"]):
                    return [("always", None)]
                if view["additional"] is not False:
                    return None
                out += [("present", name) for name, value in view["properties"].items() if name not in names and value is not False]
            else:
                out.append((kind, detail))
        return _unmet_members(out)

    def _negated_twice(self, schema: Any, base: str, path: tuple) -> Any:
        """``x`` where ``schema`` is ``{"not": x}`` (through :meth:`_lone_branch`, nothing else
        beside it but annotations); else ``None``."""
        inner = self._lone_branch(schema, base, path)
        if isinstance(inner, dict) and [k for k in inner if not M.is_annotation(k)] == ["not"]:
            return inner["not"]
        return None

    def _lone_branch(self, schema: Any, base: str, path: tuple) -> Any:
        """``schema`` through plain references and applicators of one branch with nothing
        beside them but annotations (``{"anyOf": [x]}`` is ``x``); ``None`` where a reference
        leads out of the document's base."""
        for _ in range(32):
            schema = self._plain_target(schema, base, path)
            if not isinstance(schema, dict):
                return schema
            own = [k for k in schema if not M.is_annotation(k)]
            if len(own) != 1 or own[0] not in _APPLICATORS or not isinstance(schema[own[0]], list) or len(schema[own[0]]) != 1:
                return schema
            schema = schema[own[0]][0]
        return None

    def any_of_type(self, first: int) -> E.Expr:
        """Every value whose text starts with a byte of ``first`` (a type's, :data:`_FIRST_BYTES`),
        with calls of the any-value rule (:meth:`any_value`) inside containers."""
        return _starting_with(self.any_value(), first)

    def _one_of_by_type(
        self, s: dict, branches: list[E.Expr], depth: int, base: str, path: tuple, context: frozenset[str]
    ) -> E.Expr | None:
        """``oneOf`` taken type by type, where that needs no complement of a value with calls (a
        complement would inline every value to ``max_depth``): a type two branches accept whole
        is out, a type one branch's values alone have is that branch's, the branches' values of
        a type the prover shows disjoint are their union, those of a scalar type are told
        apart by automaton algebra (they hold no call), and overlapping object schemas by the
        ways to fail them (:meth:`_objects_in_one_branch`). ``None`` where another type needs more."""
        schemas = [normalize_keywords(b, self.draft) if isinstance(b, dict) else b for b in s["oneOf"]]
        out = []
        for kind in sorted(context):
            first = _FIRST_BYTES[kind]
            pieces = [_starting_with(branch, first) for branch in branches]
            if None in pieces:
                return None
            held = [piece for piece in pieces if piece is not E.EMPTY]
            whole = sum(_accepts_every(schema, kind, self.draft) for schema in schemas)
            if whole >= 2 or len(held) <= 1:
                out += [] if whole >= 2 else held
            elif kind in _SCALAR_TYPES and not any(E.has_calls(piece) for piece in held):
                out += [E.diff(piece, E.alt(*held[:i], *held[i + 1 :])) for i, piece in enumerate(held)]
            elif self.prover.disjoint(s["oneOf"], base, {kind}, s):
                out += held
            elif kind == "object" and (exclusive := self._objects_in_one_branch(
                [b for b, piece in zip(s["oneOf"], pieces) if piece is not E.EMPTY], depth, base, path
            )) is not None:
                out.append(exclusive)
            elif kind == "array" and (exclusive := self._arrays_in_one_branch(
                [b for b, piece in zip(s["oneOf"], pieces) if piece is not E.EMPTY], depth, base, path
            )) is not None:
                out.append(exclusive)
            else:
                return None
        return E.alt(*out)

    def _lower_object_schema(
        self, s: dict, depth: int, base: str, path: tuple, context: frozenset[str], names: frozenset[str]
    ) -> E.Expr:
        before = set(self.narrowed)
        names = names | self.location_names(s, base, path)
        in_place = [k for k in ("$ref", "enum", "const", "allOf", "anyOf", "oneOf", "not", "if") if k in s]
        # A schema of only in-place keywords ({"oneOf": [...]}) adds no type part: "any value"
        # intersected in would cost states and note a depth cut for nothing.
        for branch in s.get("allOf", ()) if isinstance(s.get("allOf"), list) else ():
            # A branch's own type (or its plain reference's) bounds the value's types: the others'
            # type parts need no more.
            declared = _declared_types(self._plain_target(branch, base, path))
            if declared is not None:
                context = context & declared
        parts = [] if in_place and "type" not in s and not _TYPE_SPECIFIC & s.keys() else [self._typed(s, depth, base, path, names, context)]
        # The schema each part is the language of, where one is (for _inter_by_type).
        sources: list[Any] = [{k: v for k, v in s.items() if k not in _IN_PLACE and k not in ("enum", "const")}] * len(parts)
        if self._literals_within_reach(s):
            # The value set is a finite list of literals none of which is deep enough to be cut:
            # a depth note raised while building the type part does not apply.
            for key in set(self.narrowed) - before:
                if key[0] == "max_depth":
                    del self.narrowed[key]
        if "type" in s:
            context = context & {basic_type(t) for t in self._types(s, path)}
        # In-place subschemas apply to this same value, so they inherit the types allowed here.
        sub = lambda value, *keys: self.lower(value, depth, base, path + keys, context, names)  # noqa: E731
        if "$ref" in s:
            target = self.resolver.resolve(s["$ref"], base, path)
            parts.append(self.lower(target.schema, depth, target.base, target.path, context, names))
            sources.append(target.schema)
        for keyword in ("$dynamicRef", "$recursiveRef"):
            if keyword in s:
                raise UnsupportedFeatureError(keyword, json_pointer(path), "fsm", "dynamic scope is not resolved")
        if "enum" in s:
            if not isinstance(s["enum"], list):
                raise InvalidSchemaError("enum must be an array", json_pointer(path + ("enum",)))
            parts.append(E.alt(*(self.literal(v) for v in s["enum"])))
            sources.append(None)
        if "const" in s:
            parts.append(self.literal(s["const"]))
            sources.append(None)
        for i, branch in enumerate(s.get("allOf", ())):
            if not _allows_anything(branch):  # an annotation-only branch is "every value": ∩ keeps the rest
                parts.append(sub(branch, "allOf", i))
                sources.append(branch)
        if "anyOf" in s:
            parts.append(E.alt(*(sub(b, "anyOf", i) for i, b in enumerate(s["anyOf"]))))
            sources.append({"anyOf": s["anyOf"]})
        # Complements are exact within universe(depth) (the invariant of lower), so every
        # "not in x" is taken there.
        if "oneOf" in s:
            branches = [sub(b, "oneOf", i) for i, b in enumerate(s["oneOf"])]
            if self.prover.disjoint(s["oneOf"], base, context, s):
                parts.append(E.alt(*branches))  # at most one can hold: oneOf is anyOf
            elif self.pushdown and (by_type := self._one_of_by_type(s, branches, depth, base, path, context)) is not None:
                parts.append(by_type)
            else:
                within = self.bounded(depth, path)
                parts.append(E.alt(*(E.diff(E.inter(b, within), E.alt(*branches[:i], *branches[i + 1 :])) for i, b in enumerate(branches))))
            sources.append(None)
        if "not" in s:
            sources.append({"not": s["not"]})
            if accepts_everything(s["not"]):
                parts.append(E.EMPTY)  # not {}: nothing is valid (and no search has to find that out)
            elif (twice := self._negated_twice(s["not"], base, path)) is not None:
                parts.append(sub(twice, "not", "not"))  # ¬¬x is x: no complement to take
            else:
                # No context: the complement must be exact for every type.
                negated = self.lower(s["not"], depth, base, path + ("not",), names=names)
                by_type = self._not_by_type(s["not"], negated, context, depth, base, path) if self.pushdown else None
                parts.append(E.diff(self.bounded(depth, path), negated) if by_type is None else by_type)
        if "if" in s:
            condition = sub(s["if"], "if")
            then = sub(s["then"], "then") if "then" in s else self.free(path)
            else_ = sub(s["else"], "else") if "else" in s else self.free(path)
            parts.append(E.alt(E.inter(condition, then), E.diff(E.inter(else_, self.bounded(depth, path)), condition)))
            sources.append(None)
        if self.pushdown and len(parts) > 1:
            # Any value (a true branch) holds every value another part can write: keeping it
            # would only intersect two languages with calls.
            kept = [(part, source) for part, source in zip(parts, sources) if part is not self.any_value()]
            parts, sources = map(list, zip(*kept)) if kept else (parts, sources)
        try:
            return E.inter(*parts)
        except E.CallsUnderAlgebraError:
            if not self.pushdown:
                raise
            return self._inter_by_type(parts, sources, context)

    def _inter_by_type(self, parts: list[E.Expr], sources: list[Any], context: frozenset[str]) -> E.Expr:
        """The intersection of ``parts`` type by type: a part whose schema (``sources``, ``None``
        where a part is none's) surely holds every value of a type is left out there
        (:func:`_accepts_every`), as is a part whose values of the type are all of them
        (:meth:`any_of_type`), since every other part's values of it are values it has; a type
        some part has no value of is ∅. Raises ``CallsUnderAlgebraError`` where two parts with
        calls remain."""
        out = []
        for kind in sorted(context):
            first = _FIRST_BYTES[kind]
            every = self.any_of_type(first)
            kept = [part for part, source in zip(parts, sources) if source is None or not _accepts_every(source, kind, self.draft)]
            pieces = [_starting_with(part, first) for part in kept or parts[:1]]
            if None in pieces:
                raise E.CallsUnderAlgebraError("a call reads the first byte of a part")
            out.append(E.inter(*([piece for piece in pieces if piece is not every] or pieces)))
        return E.alt(*out)

    def _literals_within_reach(self, s: dict) -> bool:
        values = s["enum"] if isinstance(s.get("enum"), list) else [s["const"]] if "const" in s else None
        return values is not None and not self.recursive and all(_nesting(v) <= self.free_depth for v in values)

    def _types(self, s: dict, path: tuple) -> set[str]:
        declared = s.get("type")
        if declared is None:
            return set(BASIC_TYPES) | {"integer"}
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list) or not all(n in BASIC_TYPES | {"integer"} for n in names):
            raise InvalidSchemaError(f"bad type {declared!r}", json_pointer(path + ("type",)))
        return set(names)

    def _typed(self, s: dict, depth: int, base: str, path: tuple, names: frozenset[str], context: frozenset[str] = BASIC_TYPES) -> E.Expr:
        """The type part of ``s``, for the types it allows within ``context`` (the types an
        enclosing schema of the same value allows: the others would be intersected away)."""
        types = {t for t in self._types(s, path) if basic_type(t) in context}
        parts = []
        if "null" in types:
            parts.append(E.literal("null"))
        if "boolean" in types:
            parts.append(E.alt(E.literal("true"), E.literal("false")))
        if "number" in types or "integer" in types:
            parts.append(self._number(s, "number" not in types, path))
        if "string" in types:
            parts.append(self._string(s, path))
        for kind in ("array", "object"):
            if kind not in types:
                continue
            if depth < 0:
                self.note_depth(path)
            elif kind == "array":
                parts.append(self._array(s, depth, base, path))
            else:
                parts.append(_ObjectLowering(self, s, depth, base, path, names).build())
        return E.alt(*parts)

    # ------------------------------------------------------------------ scalars

    def _number(self, s: dict, integer: bool, path: tuple) -> E.Expr:
        parts = [self.numbers.integer if integer else self.numbers.number]
        where = json_pointer(path)
        if "minimum" in s:
            parts.append(T.number_at_least(_decimal(s["minimum"], "minimum", where)))
        if "maximum" in s:
            parts.append(T.number_at_most(_decimal(s["maximum"], "maximum", where)))
        if "exclusiveMinimum" in s:
            bound = _decimal(s["exclusiveMinimum"], "exclusiveMinimum", where)
            parts.append(T.number_at_least(bound, exclusive=True))
        if "exclusiveMaximum" in s:
            bound = _decimal(s["exclusiveMaximum"], "exclusiveMaximum", where)
            parts.append(T.number_at_most(bound, exclusive=True))
        if "multipleOf" in s:
            step = _decimal(s["multipleOf"], "multipleOf", where)
            if step <= 0:
                raise InvalidSchemaError("multipleOf must be > 0", json_pointer(path + ("multipleOf",)))
            parts.append(T.multiple_of(step, json_pointer(path + ("multipleOf",))))
        return E.inter(*parts)

    def key_pattern(self, pattern: str, path: tuple) -> E.Expr:
        """The member keys (JSON string texts) whose names match ``pattern``."""
        return E.cat(T.QUOTE, self.encode(self.pattern(pattern, path + ("patternProperties", pattern))), T.QUOTE)

    def pattern(self, pattern: Any, path: tuple) -> E.Expr:
        """Decoded-character language of a JSON Schema ``pattern`` (search semantics)."""
        if not isinstance(pattern, str):
            raise InvalidSchemaError("pattern must be a string", json_pointer(path))
        if pattern not in self._patterns:
            from grammask.grammars.fsm.regex import pattern_to_expr

            try:
                self._patterns[pattern] = pattern_to_expr(pattern)
            except UnsupportedFeatureError as exc:
                raise UnsupportedFeatureError("pattern", json_pointer(path), "fsm", f"{exc.feature} at {exc.path} of {pattern!r}") from None
        return self._patterns[pattern]

    def _format(self, s: dict, path: tuple) -> E.Expr:
        """The encoded string bodies of a ``format``."""
        name = s["format"]
        encoded = T.encoded_format(name) if isinstance(name, str) else None
        if encoded is None:
            self.note("format", path, f"unknown format {name!r}: any string accepted")
            return self.encode(T.ANY_CHARS)
        if name in FORMAT_NARROWINGS:
            self.note("format", path, FORMAT_NARROWINGS[name], narrowing=True)
        if name not in self.judged_formats:
            self.note("format", path, unasserted_format_note(name), narrowing=True)
        return encoded

    def _string(self, s: dict, path: tuple) -> E.Expr:
        # The encoding is an injective morphism, so it distributes over ∩: encode each part.
        # Length bounds, patterns and formats are languages of Unicode scalar values (regexes and
        # formats are built from char_ranges), so each part lies within the encoded universe
        # and stands in for it: the universe is only a part of its own, and a string with one
        # constraint stays free of ∩.
        parts = []
        lo, hi = s.get("minLength", 0), s.get("maxLength")
        if lo or hi is not None:
            lo, hi = self.count_bounds(int(lo), None if hi is None else int(hi), "maxLength", path)
            parts.append(E.counted(T.ENCODED_CHAR, lo, hi))
        if "pattern" in s:
            parts.append(self.encode(self.pattern(s["pattern"], path + ("pattern",))))
        if "format" in s and self.assert_formats:
            parts.append(self._format(s, path + ("format",)))
        return E.cat(T.QUOTE, E.inter(*parts) if parts else self.encode(T.ANY_CHARS), T.QUOTE)

    def literal(self, value: Any) -> E.Expr:
        """Every text of this spec's canonical form that equals ``value`` (JSON equality)."""
        if value is None:
            return E.literal("null")
        if isinstance(value, bool):
            return E.literal("true" if value else "false")
        if isinstance(value, (int, float)):
            return self.numbers.equal(Decimal(value) if isinstance(value, int) else Decimal(repr(value)))
        if isinstance(value, str):
            return T.string_literal(value)
        if isinstance(value, list):
            items = [self.literal(v) for v in value]
            body = E.cat(*[x for i, item in enumerate(items) for x in ((self.comma, item) if i else (item,))])
            return self.list_text("[", "]", body, False) if items else self.list_text("[", "]", E.EMPTY, True)
        members = {k: T.string_then(k, E.cat(self.colon, self.literal(v))) for k, v in value.items()}
        if not members:
            return self.list_text("{", "}", E.EMPTY, True)
        if self.declared:
            keys = sorted(members, key=lambda k: self.rank[k])
            return self.object_text([(members[k], True) for k in keys], E.EMPTY)
        # Any order: members drawn from this set, each present, exactly len(value) of them.
        shape = self.object_text([], E.alt(*members.values()))
        count = self.counted(self.member_any(), len(members), len(members), "{", "}", ())
        return E.inter(shape, count, *(self._has(m) for m in members.values()))

    def member_any(self) -> E.Expr:
        return E.cat(self.any_string, self.colon, self.loose())

    # ------------------------------------------------------------------ containers

    def evaluated(self, s: dict, base: str, path: tuple, keyword: str):
        """What the in-place subschemas of ``s`` evaluate, for ``unevaluated*``: ``True`` (all),
        or for properties ``(names, patterns)`` and for items the evaluated prefix length.

        Only ``allOf`` and ``$ref`` (which always apply) are followed; an applicator whose
        annotations depend on which branch validates (anyOf, oneOf, if, dependentSchemas,
        contains) raises :class:`UnsupportedFeatureError`.
        """
        items = keyword == "unevaluatedItems"
        names: list[str] = []
        patterns: list[str] = []
        length = 0
        stack, seen = [(s, base, path)], set()
        while stack:
            original, node_base, node_path = stack.pop()
            if original is True or original is False or id(original) in seen:
                continue
            seen.add(id(original))
            node = normalize_keywords(original, self.draft)
            nested = original is not s
            conditional = [k for k in ("anyOf", "oneOf", "if", "dependentSchemas", "$dynamicRef") + (("contains",) if items else ()) if k in node]
            if conditional:
                raise UnsupportedFeatureError(keyword, json_pointer(path), "fsm", f"next to '{conditional[0]}' at '{json_pointer(node_path)}'")
            if nested and (("items" in node) if items else ("additionalProperties" in node)):
                return True
            if nested and keyword in node:
                return True
            if items:
                length = max(length, len(node.get("prefixItems", ())))
            else:
                names += [n for n in node.get("properties", {}) if n not in names]
                patterns += [p for p in node.get("patternProperties", {}) if p not in patterns]
            for i, branch in enumerate(node.get("allOf", ())):
                stack.append((branch, node_base, node_path + ("allOf", i)))
            if "$ref" in node:
                target = self.resolver.resolve(node["$ref"], self.resolver.base_of(node, node_base), node_path)
                stack.append((target.schema, target.base, target.path))
        return length if items else (names, patterns)

    def _array(self, s: dict, depth: int, base: str, path: tuple) -> E.Expr:
        if "contains" in s and self.pushdown and (containing := self._items_containing(s, depth, base, path)) is not None:
            return containing
        sub = lambda value, *keys: self.child(value, depth, base, path + keys)  # noqa: E731
        prefix = [sub(item, "prefixItems", i) for i, item in enumerate(s.get("prefixItems", ()))]
        if "items" in s:
            rest = sub(s["items"], "items")
        elif "unevaluatedItems" in s:
            evaluated = self.evaluated(s, base, path, "unevaluatedItems")
            if evaluated is True:
                rest = self.free(path)
            else:
                # Positions evaluated by allOf / $ref subschemas are theirs to constrain.
                prefix += [self.free(path)] * (evaluated - len(prefix))
                rest = sub(s["unevaluatedItems"], "unevaluatedItems")
        else:
            rest = E.EMPTY if (self.spec.strict and prefix) else self.free(path)
        lo, hi = int(s.get("minItems", 0)), s.get("maxItems")
        parts = [self.items_text(prefix, rest, lo, None if hi is None else int(hi), path)]
        if "contains" in s:
            chosen = sub(s["contains"], "contains")
            low = int(s.get("minContains", 1))
            high = s.get("maxContains")
            others = E.diff(self.bounded(depth, path), chosen)  # exact within the child's universe
            parts.append(self._contains(chosen, others, low, None if high is None else int(high), path))
        if s.get("uniqueItems") is True:
            parts += self._unique(s, path)
        return E.inter(*parts)

    def _items_containing(self, s: dict, depth: int, base: str, path: tuple) -> E.Expr | None:
        """The arrays of ``s`` (``contains`` among its keywords) with calls at their items, item
        by item: each item is read as one ``contains`` accepts, merged with the item's own
        schema, or as any item of its own schema (one that ``contains`` rejects where
        ``maxContains`` counts them), with the item and ``contains`` counts in the chain, so no
        intersection of arrays of values with calls is taken (that inlined every item to
        ``max_depth``). Without ``maxContains``, an accepted item may be read either way: an
        array is read as one of at least ``minContains`` such items when it has them. ``None``
        (the intersection is taken) with ``uniqueItems`` or ``unevaluatedItems``, a bound out
        of :data:`MAX_CONTAINS`, or past :data:`MAX_CONTAINS_STATES` counts."""
        if s.get("uniqueItems") is True or "unevaluatedItems" in s:
            return None
        prefix = s.get("prefixItems", [])
        rest = s["items"] if "items" in s else (False if self.spec.strict and prefix else True)
        lo_items, hi_items = s.get("minItems", 0), s.get("maxItems")
        lo, hi = s.get("minContains", 1), s.get("maxContains")
        if not isinstance(prefix, list) or not _counts_within_repeat(lo_items, hi_items, lo, hi) or max(lo, hi or 0) > MAX_CONTAINS:
            return None
        if hi is not None and hi < lo:
            return E.EMPTY
        # Past ``last`` items, an unbounded array's next positions all read alike (``rest``).
        last = max(len(prefix), lo_items) if hi_items is None else hi_items
        if (last + 1) * ((lo if hi is None else hi) + 1) > MAX_CONTAINS_STATES:
            return None
        contains = s["contains"]
        item_at = lambda i: prefix[i] if i < len(prefix) else rest  # noqa: E731
        value = lambda schema, *keys: self.child(schema, depth, base, path + keys)  # noqa: E731
        chosen = lambda i: value(self.combined_schema([item_at(i), contains], []), "contains")  # noqa: E731
        other = lambda i: value(self.combined_schema([item_at(i)], [contains]), "not", "contains")  # noqa: E731
        own = lambda i: value(item_at(i), *(("prefixItems", i) if i < len(prefix) else ("items",)))  # noqa: E731
        top = lo if hi is None else hi  # counted items beyond are not told apart (or not allowed)
        after: dict[tuple[int, int], E.Expr] = {}  # the text after i items, count of them counted

        def more(i: int, count: int, lead: E.Expr) -> list[E.Expr]:
            """One more item (``lead`` before it) and the rest, after ``i`` items, ``count`` counted."""
            if hi_items is not None and i >= hi_items:
                return []
            following = min(i + 1, last) if hi_items is None else i + 1
            if hi is None and count >= lo:
                return [E.cat(lead, own(i), after[(following, count)])]
            options = [E.cat(lead, own(i) if hi is None else other(i), after[(following, count)])]
            if count < top:
                options.append(E.cat(lead, chosen(i), after[(following, count + 1)]))
            return options

        for count in range(top, -1, -1):  # built from the end back: no recursion, however long
            end = [E.EPS] if last >= lo_items and count >= lo else []
            if hi_items is None:  # the last position repeats: its uncounted items are a loop
                loop = E.star(E.cat(self.comma, own(last) if hi is None else other(last)))
                counted = [E.cat(self.comma, chosen(last), after[(last, count + 1)])] if count < top else []
                after[(last, count)] = E.cat(loop, E.alt(*end, *counted))
            else:
                after[(last, count)] = E.alt(*end)
        for i in range(last - 1, 0, -1):
            for count in range(top, -1, -1):
                end = [E.EPS] if i >= lo_items and count >= lo else []
                after[(i, count)] = E.alt(*end, *more(i, count, self.comma))
        return self.list_text("[", "]", E.alt(*more(0, 0, E.EPS)), lo_items == 0 and lo == 0)

    def _contains(self, chosen: E.Expr, other: E.Expr, lo: int, hi: int | None, path: tuple) -> E.Expr:
        """Arrays in which between ``lo`` and ``hi`` elements are ``chosen`` (others are ``other``)."""
        for bound in (lo, hi or 0):
            if bound > MAX_CONTAINS:
                raise CompileLimitError("max_repeat", bound, MAX_CONTAINS, f"contains at '{json_pointer(path)}'")
        if hi is not None and hi < lo:
            return E.EMPTY
        others = E.star(E.cat(self.comma, other))
        memo: dict[tuple, E.Expr] = {}

        def rest(need: int, room: int | None) -> E.Expr:
            key = (need, room)
            if key not in memo:
                if room is None and need == 0:
                    memo[key] = E.star(E.cat(self.comma, E.alt(chosen, other)))
                else:
                    options = [E.EPS] if need == 0 else []
                    if room is None or room > 0:
                        options.append(E.cat(self.comma, chosen, rest(max(need - 1, 0), None if room is None else room - 1)))
                    memo[key] = E.cat(others, E.alt(*options))
            return memo[key]

        first = E.cat(other, rest(lo, hi))
        if hi is None or hi > 0:
            first = E.alt(first, E.cat(chosen, rest(max(lo - 1, 0), None if hi is None else hi - 1)))
        return self.list_text("[", "]", first, lo == 0)

    def _unique(self, s: dict, path: tuple) -> list[E.Expr]:
        """The languages whose intersection holds each value of a finite item domain at most
        once; none (noted as unenforced) for other items: intersecting with the universe would
        only inline the items."""
        domain = self._finite_domain(s.get("items"))
        if domain is None or "prefixItems" in s:
            self.note("uniqueItems", path, "arrays with repeated items are accepted")
            return []
        parts = []
        for value in domain:
            same = self.literal(value)
            parts.append(self._contains(same, E.diff(self.loose(), same), 0, 1, path))
        return parts

    @staticmethod
    def _finite_domain(items: Any) -> list | None:
        if not isinstance(items, dict):
            return None
        if "const" in items:
            return [items["const"]]
        if isinstance(items.get("enum"), list) and len(items["enum"]) <= 16:
            return items["enum"]
        if items.get("type") == "boolean" and set(items) <= {"type", "description", "title"}:
            return [True, False]
        return None

    def _has(self, member: E.Expr, *, called: bool = False) -> E.Expr:
        """Objects (any members) with at least one top-level member in ``member``, in any order;
        with ``called``, the other members' values are calls of the any-value rule (no
        intersection may be taken of the result). For a member known by its name alone, a
        repeated name cannot hide that member's presence: any text of such an object parses to
        one that has it."""
        any_member = E.cat(self.any_string, self.colon, self.any_value()) if called else self.member_any()
        body = E.cat(E.star(E.cat(any_member, self.comma)), member, E.star(E.cat(self.comma, any_member)))
        return self.list_text("{", "}", body, False)

    def _twice(self, member: E.Expr) -> E.Expr:
        any_member = self.member_any()
        gap = E.star(E.cat(self.comma, any_member))
        body = E.cat(E.star(E.cat(any_member, self.comma)), member, gap, self.comma, member, gap)
        return self.list_text("{", "}", body, False)

    def location_names(self, s: dict, base: str, path: tuple) -> frozenset[str]:
        """DECLARED order: the ranked names that ``s`` and the schemas it applies in place mention,
        when one of those complements another (``oneOf``, ``not``, ``if``); else none.

        Every object language of the value then gives each of these names a slot in rank order, so
        the languages an intersection or a complement combines write the same objects the same
        way, and a prefix that no branch can finish dies as an expression (``x ∩ ¬x`` is ∅)
        instead of after a search of every state behind it. Past :data:`MAX_LOCATION_NAMES`
        the slots would cost more than the searches they save: none are added."""
        if not self.declared or ("$ref" not in s and not any(k in s for k in _IN_PLACE_KEYWORDS)):
            return frozenset()  # (nothing in place, so nothing complements: every complementing keyword is one)
        key = (id(s), base)
        if key not in self._location_names:
            found: set[str] = set()
            complementing = False
            stack, seen = [(s, base)], set()
            while stack:
                node, node_base = stack.pop()
                if not isinstance(node, dict) or id(node) in seen:
                    continue
                seen.add(id(node))
                node = normalize_keywords(node, self.draft)
                complementing = complementing or any(k in node for k in _COMPLEMENTING)
                found.update(n for n in [*node.get("properties", {}), *node.get("required", ())] if n in self.rank)
                for keyword in _IN_PLACE_KEYWORDS:
                    value = node.get(keyword)
                    stack.extend((v, node_base) for v in (value if isinstance(value, list) else [value]))
                if isinstance(node.get("$ref"), str):
                    target = self.resolver.resolve(node["$ref"], self.resolver.base_of(node, node_base), path)
                    stack.append((target.schema, target.base))
            useful = complementing and len(found) <= MAX_LOCATION_NAMES
            self._location_names[key] = frozenset(found) if useful else frozenset()
        return self._location_names[key]


class _ObjectLowering:
    """The object part of one schema object at one depth; ``names`` get slots besides its own
    (see :meth:`_Lowerer.location_names`)."""

    def __init__(self, owner: _Lowerer, s: dict, depth: int, base: str, path: tuple, names: frozenset[str]) -> None:
        self.o, self.s, self.depth, self.base, self.path = owner, s, depth, base, path
        self.names = names
        self.props: dict = s.get("properties", {})
        self.pattern_props: dict = s.get("patternProperties", {})
        self.required: list = list(s.get("required", ()))
        if "additionalProperties" in s:
            self.additional = self.sub(s["additionalProperties"], "additionalProperties")
        elif "unevaluatedProperties" in s:
            evaluated = owner.evaluated(s, base, path, "unevaluatedProperties")
            if evaluated is True:
                self.additional = owner.free(path)
            else:
                # Names and patterns evaluated by allOf / $ref subschemas are theirs to constrain.
                names, patterns = evaluated
                self.props = {**{n: True for n in names}, **self.props}
                self.pattern_props = {**{p: True for p in patterns}, **self.pattern_props}
                self.additional = self.sub(s["unevaluatedProperties"], "unevaluatedProperties")
        else:
            self.additional = E.EMPTY if owner.spec.strict else owner.free(path)
        self.property_names = self._property_names(s.get("propertyNames", True))

    @functools.cached_property
    def inner(self) -> E.Expr:
        """"No constraint" on a member value (intersected, never complemented); built when used."""
        return self.o.loose()

    def _property_names(self, schema: Any) -> E.Expr:
        if schema is True:
            return self.o.any_string
        # Names are strings: lowered at depth 0, without the depth notes of the non-string parts.
        before = set(self.o.narrowed)
        names = E.inter(self.o.any_string, self.o.lower(schema, 0, self.base, self.path + ("propertyNames",), frozenset({"string"})))
        for key in set(self.o.narrowed) - before:
            if key[0] == "max_depth":
                del self.o.narrowed[key]
        return names

    def sub(self, value: Any, *keys: Any) -> E.Expr:
        return self.o.child(value, self.depth, self.base, self.path + keys)

    def key_pattern(self, pattern: str) -> E.Expr:
        return self.o.key_pattern(pattern, self.path)

    def value_of(self, name: str) -> E.Expr:
        """The values allowed for property ``name``."""
        parts = []
        matched = False
        if name in self.props:
            parts.append((self.props[name], ("properties", name)))
            matched = True
        for pattern, schema in self.pattern_props.items():
            # The very language the grammar gives the pattern: linear in the name, inside the
            # compile budget (a backtracking search could take hours on a hostile pattern).
            chars = self.o.pattern(pattern, self.path + ("patternProperties", pattern))
            if E.matches(chars, pattern_text(name)):
                parts.append((schema, ("patternProperties", pattern)))
                matched = True
        return self.values_of_all(parts) if matched else self.additional

    def values_of_all(self, parts: list[tuple[Any, tuple]]) -> E.Expr:
        """The values every schema of ``parts`` (``(schema, keys under this object's path)``)
        allows: ∅ where one allows none, else the intersection of those that constrain values.
        Where at most one does (a name that a pattern of ``{}`` matches too, or one of
        ``unevaluatedProperties``' evaluated patterns), no intersection of values is taken: their
        calls stay calls."""
        if any(_allows_nothing(schema) for schema, _ in parts):
            return E.EMPTY
        constraining = [(schema, keys) for schema, keys in parts if not _allows_anything(schema)] or parts[:1]
        if self.o.pushdown and len(constraining) > 1:
            # One value of their allOf: its own lowering merges object and array schemas (or
            # inlines that value alone), where an intersection here would inline this object.
            return self.sub(self.o.combined_schema([schema for schema, _ in constraining], []), *constraining[0][1])
        return E.inter(*(self.sub(schema, *keys) for schema, keys in constraining))

    def member(self, name: str) -> E.Expr:
        if not self._name_allowed(name):
            return E.EMPTY
        return T.string_then(name, E.cat(self.o.colon, self.value_of(name)))

    def _name_allowed(self, name: str) -> bool:
        if self.property_names is self.o.any_string:
            return True
        if LONE_SURROGATE.search(name):  # string languages hold Unicode scalar values only
            self.o.note("propertyNames", self.path, f"the property {name!r} (it holds a lone surrogate) is rejected", narrowing=True)
            return False
        return E.matches(self.property_names, T.string_text(name))  # the key as the member writes it

    def other_member(self, excluded: list[str]) -> E.Expr:
        """Members whose key is none of the names ``excluded`` (patternProperties / additionalProperties rule)."""
        if not self.pattern_props and self.additional is E.EMPTY:
            return E.EMPTY
        any_name = self.property_names is self.o.any_string
        plain = self._disjoint_pattern_members(excluded) if any_name and self.pattern_props else None
        if plain is not None:
            return plain
        if any_name and not self.pattern_props:
            return self.o.other_members(excluded, self.additional, self.path)
        if any_name:
            keys = T.string_not_in(excluded)
        else:
            keys = E.diff(self.property_names, E.alt(*(T.string_literal(k) for k in excluded)))
        if not self.pattern_props:
            return E.cat(keys, self.o.colon, self.additional)
        regions = self._pattern_regions(keys) if self.o.pushdown else None
        if regions is not None:
            return regions
        parts = [E.cat(keys, self.o.colon, self.inner)]
        all_patterns = []
        for pattern, schema in self.pattern_props.items():
            matching = self.key_pattern(pattern)
            all_patterns.append(matching)
            value = self.sub(schema, "patternProperties", pattern)
            parts.append(E.alt(E.cat(E.diff(self.o.any_string, matching), self.o.colon, self.inner), E.cat(matching, self.o.colon, value)))
        if self.additional is not self.inner:
            union = E.alt(*all_patterns)
            parts.append(E.alt(E.cat(union, self.o.colon, self.inner), E.cat(E.diff(self.o.any_string, union), self.o.colon, self.additional)))
        return E.inter(*parts)

    def _pattern_regions(self, keys: E.Expr) -> E.Expr | None:
        """The members keyed by ``keys`` when patterns may overlap: one per set of patterns a name
        matches, its key the names of ``keys`` that match those patterns and no other, its value
        :meth:`values_of_all` of their schemas; and the names no pattern matches, with the
        additional value. Sets with two patterns no name matches together are left out. Only the
        keys are intersected and complemented (strings, no calls), so values that call rules
        (recursion, free values) stay calls: a ``{}`` pattern beside a reserved name's
        ``{"not": {}}`` no longer inlines every value of the object. ``None`` past
        :data:`MAX_REGION_PATTERNS` patterns or :data:`MAX_PATTERN_REGIONS` sets. Used where
        values are called: inlined, the intersection of whole members derives into fewer states
        (Handwritten/notnames9's first mask, every value inlined, took 0.6 s this way, not 0.35 s)."""
        patterns = list(self.pattern_props)
        if len(patterns) > MAX_REGION_PATTERNS:
            return None
        matching = {p: self.key_pattern(p) for p in patterns}
        overlaps: dict[str, set[str]] = {p: set() for p in patterns}
        for a, b in itertools.combinations(patterns, 2):
            if E.pairwise_disjoint([matching[a], matching[b]]) is not True:
                overlaps[a].add(b)
                overlaps[b].add(a)
        regions = _cliques(patterns, overlaps, MAX_PATTERN_REGIONS)
        if regions is None:
            return None
        members = []
        for chosen in regions:
            value = self.values_of_all([(self.pattern_props[p], ("patternProperties", p)) for p in chosen])
            if value is E.EMPTY:
                continue
            key = E.inter(keys, *(matching[p] for p in chosen))
            others = [matching[p] for p in patterns if p not in chosen and chosen[0] in overlaps[p]]
            members.append(E.cat(E.diff(key, E.alt(*others)) if others else key, self.o.colon, value))
        if self.additional is not E.EMPTY:
            members.append(E.cat(E.diff(keys, E.alt(*matching.values())), self.o.colon, self.additional))
        return E.alt(*members)

    def _disjoint_pattern_members(self, excluded: list[str]) -> E.Expr | None:
        """The members whose name is not in ``excluded`` (the named properties, which have slots
        of their own), when no two patterns match one name: each member is then read by its one
        pattern, ``key : value``, or by the names no pattern matches (their complement, built
        whole by :func:`~grammask.grammars.fsm.json_text.plain_complement`) with the additional
        value. The excluded names are taken out of each key by
        :func:`~grammask.grammars.fsm.expr.without_words`. A union with no ``¬`` and no ``&``,
        whose states would each need a search to tell dead from live. ``None`` when patterns may
        overlap (or it is not known within :func:`~grammask.grammars.fsm.expr.pairwise_disjoint`'s
        cap), their complement is too large to write out, or a name is very long."""
        names = [T.string_text(name) for name in excluded]
        if any(len(name) > MAX_EXCLUDED_KEY for name in names):
            return None
        keys = {p: self.key_pattern(p) for p in self.pattern_props}
        if len(keys) > 1 and E.pairwise_disjoint(list(keys.values())) is not True:
            return None
        members = [(key, self.sub(self.pattern_props[p], "patternProperties", p)) for p, key in keys.items()]
        if self.additional is not E.EMPTY:
            chars = E.alt(*(self.o.pattern(p, self.path + ("patternProperties", p)) for p in self.pattern_props))
            others = T.plain_complement(chars)
            if others is None:
                return None
            members.append((E.cat(T.QUOTE, self.o.encode(others), T.QUOTE), self.additional))
        return E.alt(*(E.cat(E.without_words(key, [n for n in names if E.matches(key, n)]), self.o.colon, value) for key, value in members))

    def _condition_bits(self) -> C.ConditionBits | None:
        """In declared order, the member conditions the slot chain tracks (no complement): a
        merged schema's :data:`CONDITION`, or a small ``dependentRequired``."""
        if CONDITION in self.s:
            return C.ConditionBits(self.s[CONDITION][0])
        dependencies = self.s.get("dependentRequired")
        formula = C.dependent_required(dependencies) if self.o.declared and dependencies else None
        bits = None if formula is None or formula is True else C.ConditionBits(formula)
        return bits if bits is not None and bits.trackable else None

    def slot(self, name: str, member: E.Expr, bits: C.ConditionBits | None) -> list[tuple[E.Expr, int]]:
        """The ``(member, bits)`` alternatives of ``name``'s slot: one per combination of verdicts of
        the value conditions on it (:meth:`value_given`)."""
        o = self.o
        if bits is None or name not in bits.names:
            return [(o.member_call(self.path, name, member), 0)]
        if name not in bits.values:
            return [(o.member_call(self.path, name, member), bits.names[name])]
        out = []
        for set_bits, satisfied, failed in bits.verdicts(name):
            value = self.value_given(name, satisfied, failed)
            if value is not E.EMPTY:
                out.append((o.member_call(self.path, name, T.string_then(name, E.cat(o.colon, value))), set_bits))
        return out

    def value_given(self, name: str, satisfied: list[str], failed: list[str]) -> E.Expr:
        """The values of member ``name`` that satisfy the value conditions ``satisfied`` and fail
        ``failed`` (keys of the :data:`CONDITION`'s value schemas; ``s`` is a merged object
        schema: ``properties`` and ``additionalProperties`` only). A finite list of literals is
        split by ``jsonschema``'s verdicts, so each part stays a plain alternation; otherwise the
        combination is lowered as a subschema of its own."""
        o, schemas = self.o, self.s[CONDITION][1]
        own = self.props[name] if name in self.props else self.s.get("additionalProperties", not o.spec.strict)
        conditions = [(schemas[k], True) for k in satisfied] + [(schemas[k], False) for k in failed]
        # A finite list of candidates: the member's own literals, or a satisfied condition's.
        domain = next((found for x in (own, *(schemas[k] for k in satisfied)) if isinstance(x, dict) and (found := literals(x)) is not None), None)
        checkable = not o.assert_formats or not any('"format"' in json.dumps(x) or '"$ref"' in json.dumps(x) for x in (own, *schemas.values()))
        if domain is not None and checkable:
            verdicts = [[o.prover.verdict(x, v) for x, _ in [(own, True), *conditions]] for v in domain]
            if all(None not in row for row in verdicts):
                chosen = [v for v, row in zip(domain, verdicts) if row == [True] + [want for _, want in conditions]]
                return E.alt(*(o.literal(v) for v in chosen))
        return self.sub(o.combined_schema([own, *(schemas[k] for k in satisfied)], [schemas[k] for k in failed]), "properties", name)

    def build(self) -> E.Expr:
        o, s = self.o, self.s
        dependencies = s.get("dependentRequired", {})
        bits = self._condition_bits()
        # Every name a tracked condition reads gets a slot.
        mentioned = list(dict.fromkeys([*self.props, *self.required, *sorted(self.names), *(bits.names if bits else ())]))
        members = {k: self.member(k) for k in mentioned}
        if any(members[name] is E.EMPTY for name in self.required):
            return E.EMPTY
        other = self.other_member(mentioned)
        lo, hi = int(s.get("minProperties", 0)), s.get("maxProperties")
        distinct_required = len({n for n in self.required if n in members})
        if lo <= distinct_required:
            lo = 0  # the required names alone reach it
        if hi is not None and other is E.EMPTY and int(hi) >= sum(m is not E.EMPTY for m in members.values()):
            hi = None  # no object the chain writes can exceed it
        if lo > 1 and other is not E.EMPTY:
            # A regular language cannot keep an open set of names distinct: the count is of members written.
            o.note("minProperties", self.path, "a name outside properties may be written twice, and counts twice")
        if lo or hi is not None:
            lo, hi = o.count_bounds(lo, None if hi is None else int(hi), "maxProperties", self.path)
        if o.declared:
            # Mentioned names in rank order, each once (required ones always); other members
            # anywhere between them. One chain: no product of constraints, few states; a small
            # count of members is carried along it too.
            order = [k for k in sorted(mentioned, key=o.rank.__getitem__) if members[k] is not E.EMPTY]
            slots = [(self.slot(k, members[k], bits), k in self.required) for k in order]
            other = o.member_call(self.path, None, other)
            in_chain = max(lo, hi or 0) <= MAX_CHAINED_COUNT
            count = (lo, hi) if in_chain else (0, None)
            parts = [o.interleaved_object(slots, other, bits.allowed if bits else None, count)]
            if in_chain:
                lo, hi = 0, None
        else:
            parts = [o.object_text([], E.alt(*members.values(), other))]
            parts += [o._has(members[name]) for name in self.required]
            parts += [E.neg(o._twice(m)) for m in members.values() if m is not E.EMPTY]
        if lo or hi is not None:
            any_member = E.cat(o.any_string, o.colon, self.inner)
            parts.append(o.counted(any_member, lo, hi, "{", "}", self.path))
        for name, needed in ({} if bits else dependencies).items():
            present = o._has(self.key_member(name))
            others = E.inter(*(o._has(self.key_member(n)) for n in needed))
            parts.append(E.neg(E.diff(present, others)))
        for name, schema in s.get("dependentSchemas", {}).items():
            present = o._has(self.key_member(name))
            then = o.lower(schema, self.depth, self.base, self.path + ("dependentSchemas", name))
            parts.append(E.neg(E.diff(present, then)))
        return E.inter(*parts)

    def key_member(self, name: str) -> E.Expr:
        return T.string_then(name, E.cat(self.o.colon, self.inner))


def _starting_with(expr: E.Expr, first: int) -> E.Expr | None:
    """The texts of ``expr`` whose first byte is in the mask ``first``, taken apart along the
    expression (so a type a value cannot have comes out ∅); ``None`` where a call of a grammar's
    own rule would read that byte (a call of the any-value or free-value rule is read through its
    body, whose calls come after an opening bracket)."""
    if expr.kind == E.CALL_KIND and (expr.args[0].shared or expr.args[0].free_value):
        expr = expr.args[0].body
    kind = expr.kind
    if kind in (E.EMPTY_KIND, E.EPS_KIND):
        return E.EMPTY
    if kind == E.BYTES_KIND:
        return E.byte_set(expr.args[0] & first)
    if kind == E.ALT_KIND:
        parts = [_starting_with(part, first) for part in expr.args]
        return None if None in parts else E.alt(*parts)
    if kind == E.CAT_KIND:
        head, rest = expr.args
        started = _starting_with(head, first)
        if started is None:
            return None
        if not E.nullable(head):
            return E.cat(started, rest)
        later = _starting_with(rest, first)
        return None if later is None else E.alt(E.cat(started, rest), later)
    if kind == E.AND_KIND:  # (a part of ∅ there makes all of it ∅)
        parts = [_starting_with(part, first) for part in expr.args]
        return None if None in parts else E.inter(*parts)
    if kind == E.STAR_KIND:  # a nonempty text of x* starts with a nonempty text of x
        started = _starting_with(expr.args[0], first)
        return None if started is None else E.cat(started, expr)
    if E.has_calls(expr) and not E.only_free_calls(expr):
        return None
    return E.inter(expr, E.cat(E.byte_set(first), E.ANY))


def _accepts_every(schema: Any, kind: str, draft: int) -> bool:
    """Whether ``schema`` (of ``draft``) surely accepts every value of the basic type ``kind``: a
    ``type`` that allows it whole, no keyword that constrains it, and of the in-place keywords
    only ``allOf`` whose every branch does, ``anyOf`` with a branch that does, ``not`` of a
    schema that surely accepts none (:func:`_rejects_every`)."""
    if schema is True or schema == {}:
        return True
    if not isinstance(schema, dict):
        return False
    schema = normalize_keywords(schema, draft)
    if schema.keys() & {*_IN_PLACE, "enum", "const", "$recursiveRef"} - {"allOf", "anyOf", "not"}:
        return False
    types = schema.get("type", [kind])
    types = [types] if isinstance(types, str) else types
    if not isinstance(types, list) or kind not in types or any(_CONSTRAINED_TYPE.get(keyword) == kind for keyword in schema):
        return False
    every, some = schema.get("allOf", []), schema.get("anyOf", [True])
    return (
        isinstance(every, list) and all(_accepts_every(branch, kind, draft) for branch in every)
        and isinstance(some, list) and any(_accepts_every(branch, kind, draft) for branch in some)
        and ("not" not in schema or _rejects_every(schema["not"], kind, draft))
    )


def _rejects_every(schema: Any, kind: str, draft: int) -> bool:
    """Whether ``schema`` (of ``draft``) surely accepts no value of the basic type ``kind``:
    ``false`` in effect, a valid ``type`` without it (``integer`` counts as ``number``), an
    ``anyOf`` whose every branch or an ``allOf`` with a branch that surely accepts none, ``not``
    of a schema that surely accepts all (:func:`_accepts_every`)."""
    if _allows_nothing(schema):
        return True
    if not isinstance(schema, dict):
        return False
    schema = normalize_keywords(schema, draft)
    declared = _declared_types(schema)
    some, every = schema.get("anyOf"), schema.get("allOf")
    return (
        (declared is not None and kind not in declared)
        or (isinstance(some, list) and bool(some) and all(_rejects_every(branch, kind, draft) for branch in some))
        or (isinstance(every, list) and any(_rejects_every(branch, kind, draft) for branch in every))
        or ("not" in schema and _accepts_every(schema["not"], kind, draft))
    )


__all__ = ["lower_json_schema", "order_instance", "prepare_shared_rules", "property_ranking"]
