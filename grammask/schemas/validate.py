"""Checking a JSON Schema against its meta-schema before anything compiles it, and validating outputs.

``jsonschema`` is imported on first use, not with this module: importing it with the
``format-nongpl`` checkers builds the IRI parsers of ``rfc3987_syntax`` (about 40 lark grammars,
seconds of CPU), which regexes, EBNF grammars and the command line's help never need.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Callable

from grammask.errors import GrammaskError, InvalidSchemaError
from grammask.schemas.formats import leap_second_times

if TYPE_CHECKING:
    import jsonschema

REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
"""The keywords whose value is a URI reference to a schema."""


def validator_class(schema: Any) -> type[jsonschema.protocols.Validator]:
    """The validator of the draft a schema declares in ``$schema`` (2020-12 when absent or unknown)."""
    import jsonschema.validators

    if isinstance(schema, dict) and isinstance(schema.get("$schema", ""), str):  # else 2020-12's meta-check names it
        return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return jsonschema.Draft202012Validator


def asserted_formats(schema: Any) -> frozenset[str]:
    """The ``format`` names the validator of ``schema``'s draft checks (:func:`instance_validator`
    with ``assert_formats``): any other name is an annotation to it, as ``uuid`` is to draft 7."""
    return frozenset(validator_class(schema).FORMAT_CHECKER.checkers)


def unasserted_format_note(name: str) -> str:
    """Why a grammar that asserts ``format: name`` narrows a schema whose draft does not assert it
    (:func:`asserted_formats`)."""
    return f"{name!r} is asserted, though this draft's validators read it as an annotation"


def stack_exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` is Python's recursion limit reached: a ``RecursionError``, or the panic that
    ``jsonschema``'s Rust-backed reference registry (``rpds``) raises when the limit is reached in
    one of its callbacks (``pyo3_runtime.PanicException``, a ``BaseException``, not an ``Exception``)."""
    if isinstance(exc, RecursionError):
        return True
    return type(exc).__name__ == "PanicException" and "RecursionError" in str(exc)


def json_pointer(parts: Any) -> str:
    """RFC 6901 pointer of a path given as a sequence of keys and indices."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


_VOCABULARY_KEYS = {"$schema", "$id", "$vocabulary", "$dynamicAnchor", "$comment", "title", "type", "properties", "$defs"}


def _flat_meta_schema(meta_schema: dict) -> dict:
    """The 2020-12 meta-schema as one document: its vocabulary meta-schemas merged into the root and
    every ``$dynamicRef: "#meta"`` read as ``$ref: "#"``.

    The two accept the same schemas and give the same first error: the dynamic anchor resolves to
    the root whenever the meta-schema is the entry point. The flat one validates about five times
    faster, as ``jsonschema`` no longer resolves a dynamic scope at every subschema. Raises
    ``ValueError`` if a vocabulary holds anything but keyword definitions."""
    import jsonschema_specifications

    flat = {key: value for key, value in meta_schema.items() if key not in ("allOf", "$id", "$dynamicAnchor")}
    flat["properties"], flat["$defs"] = dict(meta_schema.get("properties", {})), dict(meta_schema.get("$defs", {}))
    for part in meta_schema["allOf"]:
        vocabulary = jsonschema_specifications.REGISTRY.contents(_resolve(meta_schema["$id"], part["$ref"]))
        unknown = vocabulary.keys() - _VOCABULARY_KEYS
        if unknown or vocabulary.get("type", flat["type"]) != flat["type"]:
            raise ValueError(f"meta-schema vocabulary {part['$ref']} holds {sorted(unknown) or 'another type'}")
        for key in ("properties", "$defs"):
            clash = flat[key].keys() & vocabulary.get(key, {}).keys()
            if clash:
                raise ValueError(f"meta-schema vocabularies both define {key} {sorted(clash)}")
            flat[key].update(vocabulary.get(key, {}))
    return _local_refs(flat)


def _resolve(base: str, ref: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + ref


def _local_refs(node: Any) -> Any:
    """``node`` with ``$dynamicRef: "#meta"`` as ``$ref: "#"`` and every ``$ref`` cut to its fragment."""
    if isinstance(node, list):
        return [_local_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _local_refs(value) for key, value in node.items()}
    if out.get("$dynamicRef") == "#meta":
        out["$ref"] = "#"
        del out["$dynamicRef"]
    elif isinstance(out.get("$ref"), str):
        document, hash_sign, fragment = out["$ref"].partition("#")
        if not hash_sign:
            raise ValueError(f"meta-schema reference {document!r} names a whole document")
        out["$ref"] = "#" + fragment
    return out


@functools.lru_cache(maxsize=None)
def _meta_validator(cls: type[jsonschema.protocols.Validator]) -> jsonschema.protocols.Validator:
    """A validator of schemas of draft ``cls`` (2020-12 through the flat meta-schema)."""
    import jsonschema

    if cls is jsonschema.Draft202012Validator:
        try:
            return cls(_flat_meta_schema(cls.META_SCHEMA))
        except ValueError:
            pass  # a meta-schema of another shape: validate through it as published
    return cls(cls.META_SCHEMA)


_DRAFTS = {"Draft4Validator": 4, "Draft6Validator": 6, "Draft7Validator": 7, "Draft202012Validator": 2020}


@functools.lru_cache(maxsize=None)
def _fast_meta_check(cls: type[jsonschema.protocols.Validator]) -> Callable[[Any], bool]:
    """A compiled check whose yes is the meta-schema's yes (:mod:`grammask.schemas.meta_check`);
    always no (``jsonschema`` decides) for a draft it does not compile."""
    from grammask.schemas.meta_check import compile_meta_schema

    draft = _DRAFTS.get(cls.__name__)
    check = compile_meta_schema(_meta_validator(cls).schema, draft) if draft else None
    return check or (lambda schema: False)


def prepare_meta_checks() -> None:
    """Build the compiled meta-schema check of every draft now, once per process: the first schema
    of each draft a server sees then pays nothing for it (0.3-1.5 ms a draft)."""
    import jsonschema

    for name in _DRAFTS:
        _fast_meta_check(getattr(jsonschema, name))


def check_schema(schema: Any) -> None:
    """Raise when ``schema`` does not conform to its draft's meta-schema, or a reference of it leaves
    the document (``schemas.resolve.check_references``: nothing is ever fetched).

    Raises:
        InvalidSchemaError: with the JSON pointer of the first error.
        UnsupportedFeatureError: a reference to another document.
    """
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise InvalidSchemaError(f"a schema is an object or a boolean, got {type(schema).__name__}")
    import jsonschema

    cls = validator_class(schema)
    error = None if _fast_meta_check(cls)(schema) else jsonschema.exceptions.best_match(_meta_validator(cls).iter_errors(schema))
    if error is not None:
        raise InvalidSchemaError(error.message, json_pointer(error.absolute_path))
    from grammask.schemas.resolve import check_references  # resolve imports this module's json_pointer

    check_references(schema)


Search = Callable[[str, str], bool]
"""``search(pattern, text)``: whether an ECMA-262 ``pattern`` is found in ``text``; it may raise a
:class:`~grammask.errors.GrammaskError` when it cannot decide."""
IsRegex = Callable[[str], bool]
"""``is_regex(text)``: whether ``text`` is an ECMA-262 regex (``format: regex``)."""


def instance_validator(
    schema: Any, *, search: Search, is_regex: IsRegex, assert_formats: bool = True
) -> jsonschema.protocols.Validator:
    """A ``jsonschema`` validator of instances of ``schema`` (its declared draft) that never fetches
    and never runs Python's ``re``.

    - References resolve inside the schema and to the published meta-schemas shipped with
      ``jsonschema`` only; any other one raises ``referencing.exceptions.Unresolvable`` (the
      default registry would fetch ``http://`` and ``file://`` URIs).
    - ``pattern``, ``patternProperties``, and the property names ``additionalProperties`` and
      ``unevaluatedProperties`` leave to them, are decided by ``search``; ``format: regex`` by
      ``is_regex`` (``jsonschema`` uses ``re``: another dialect, and backtracking). A pattern
      ``search`` cannot decide is a validation error that says so.
    - With ``assert_formats``, formats are checked as ``jsonschema`` checks them, except that
      ``date-time`` and ``time`` also accept the leap seconds RFC 3339 allows (``:60`` at 23:59
      UTC, under any offset): ``jsonschema`` rejects every leap second, while the grammars follow
      the RFC and the JSON-Schema-Test-Suite.
    """
    import jsonschema_specifications

    cls = _safe_class(validator_class(schema), search)
    checker = _format_checker(cls, is_regex) if assert_formats else None
    return cls(schema, registry=jsonschema_specifications.REGISTRY, format_checker=checker)


_VALIDATOR_CLASSES = ("Draft3Validator", "Draft4Validator", "Draft6Validator", "Draft7Validator", "Draft201909Validator",
                      "Draft202012Validator")
"""The drafts ``jsonschema.validators.validator_for`` can answer."""


def prepare_instance_validators(search: Search, is_regex: IsRegex) -> None:
    """Build the validator class (and format checker) :func:`instance_validator` makes of every
    draft for ``search`` and ``is_regex``, once per process: the first schema of each draft a
    server sees then pays nothing for it (about 0.6 ms a draft: ``jsonschema`` builds a class)."""
    import jsonschema

    for name in _VALIDATOR_CLASSES:
        _format_checker(_safe_class(getattr(jsonschema, name), search), is_regex)


@functools.lru_cache(maxsize=None)
def _format_checker(cls: type[jsonschema.protocols.Validator], is_regex: IsRegex) -> jsonschema.FormatChecker:
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(cls.FORMAT_CHECKER.checkers)
    for name in ("date-time", "time"):
        if name in checker.checkers:
            check, raises = checker.checkers[name]
            checker.checkers[name] = (_with_leap_seconds(check, raises), raises)
    if "regex" in checker.checkers:
        checker.checkers["regex"] = (lambda text: not isinstance(text, str) or is_regex(text), ())
    return checker


@functools.lru_cache(maxsize=None)
def _safe_class(cls: type[jsonschema.protocols.Validator], search: Search) -> type[jsonschema.protocols.Validator]:
    """``cls`` with every keyword that reads a regex decided by ``search``."""
    import jsonschema.validators

    keywords = _PatternKeywords(search)
    replaced = {"pattern": keywords.pattern, "patternProperties": keywords.pattern_properties,
                "additionalProperties": keywords.additional_properties}
    if "unevaluatedProperties" in cls.VALIDATORS:
        replaced["unevaluatedProperties"] = keywords.unevaluated_properties
    return jsonschema.validators.extend(cls, validators={k: v for k, v in replaced.items() if k in cls.VALIDATORS})


class _Undecided(Exception):
    def __init__(self, error: GrammaskError) -> None:
        self.error = error


class _PatternKeywords:
    """The regex-reading keywords of ``jsonschema``, with matches decided by ``search``."""

    def __init__(self, search: Search) -> None:
        self._search = search

    def _found(self, pattern: str, text: str) -> bool:
        try:
            return self._search(pattern, text)
        except GrammaskError as error:
            raise _Undecided(error) from None

    def _any_found(self, patterns: Any, text: str) -> bool:
        return any(self._found(pattern, text) for pattern in patterns)

    def pattern(self, validator, pattern, instance, schema):
        if not validator.is_type(instance, "string"):
            return
        try:
            if not self._found(pattern, instance):
                yield _validation_error(f"{instance!r} does not match {pattern!r}")
        except _Undecided as undecided:
            yield _validation_error(str(undecided.error))

    def pattern_properties(self, validator, pattern_properties, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        for pattern, subschema in pattern_properties.items():
            for name, value in instance.items():
                try:
                    found = self._found(pattern, name)
                except _Undecided as undecided:
                    yield _validation_error(f"property {name!r}: {undecided.error}", path=[name])
                    continue
                if found:
                    yield from validator.descend(value, subschema, path=name, schema_path=pattern)

    def _extras(self, instance: dict, schema: dict) -> list[str]:
        """The names neither ``properties`` nor ``patternProperties`` take (raises :class:`_Undecided`)."""
        named = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        return [name for name in instance if name not in named and not self._any_found(patterns, name)]

    def additional_properties(self, validator, additional, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        try:
            extras = self._extras(instance, schema)
        except _Undecided as undecided:
            yield _validation_error(str(undecided.error))
            return
        if validator.is_type(additional, "object"):
            for name in extras:
                yield from validator.descend(instance[name], additional, path=name)
        elif additional is False and extras:
            listed = ", ".join(repr(name) for name in sorted(extras))
            yield _validation_error(f"Additional properties are not allowed ({listed} unexpected)")

    def unevaluated_properties(self, validator, unevaluated, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        try:
            evaluated = self._evaluated(validator, instance, schema)
        except _Undecided as undecided:
            yield _validation_error(str(undecided.error))
            return
        failing = [name for name in instance if name not in evaluated
                   and next(validator.descend(instance[name], unevaluated, path=name), None) is not None]
        if failing:
            listed = ", ".join(repr(name) for name in sorted(failing))
            yield _validation_error(f"Unevaluated properties are not allowed ({listed} unexpected)")

    def _evaluated(self, validator, instance: dict, schema: Any) -> set[str]:
        """The names the annotations of ``schema`` and its in-place subschemas evaluate (JSON Schema
        2019-09 / 2020-12 §11.3): ``properties``, ``patternProperties``, ``additionalProperties`` and
        ``unevaluatedProperties`` (the names they validate), and recursively the references, the
        ``allOf`` / ``anyOf`` / ``oneOf`` branches and the ``if`` / ``then`` / ``else`` and
        ``dependentSchemas`` subschemas that hold on ``instance``."""
        if not isinstance(schema, dict):
            return set()
        names: set[str] = set()
        for keyword in REFERENCE_KEYWORDS:
            reference = schema.get(keyword)
            if isinstance(reference, str):
                resolved = validator._resolver.lookup(reference)  # the resolver jsonschema uses for $ref
                inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
                names |= self._evaluated(inner, instance, resolved.contents)
        named = schema.get("properties")
        if isinstance(named, dict):
            names |= named.keys() & instance.keys()
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict):
            names |= {name for name in instance if self._any_found(patterns, name)}
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            if keyword in schema:
                names |= {name for name, value in instance.items() if _holds(validator, schema[keyword], value)}
        for name, subschema in schema.get("dependentSchemas", {}).items():
            if name in instance:
                names |= self._evaluated(validator, instance, subschema)
        for keyword in ("allOf", "anyOf", "oneOf"):
            for subschema in schema.get(keyword, []):
                if _holds(validator, subschema, instance):
                    names |= self._evaluated(validator, instance, subschema)
        if "if" in schema:
            branch = "then" if _holds(validator, schema["if"], instance) else "else"
            if branch == "then":
                names |= self._evaluated(validator, instance, schema["if"])
            names |= self._evaluated(validator, instance, schema.get(branch))
        return names


def _validation_error(message: str, **where: Any) -> jsonschema.ValidationError:
    from jsonschema.exceptions import ValidationError  # jsonschema is loaded by now: a validator calls this

    return ValidationError(message, **where)


def _holds(validator, subschema: Any, instance: Any) -> bool:
    return next(validator.descend(instance, subschema), None) is None


_LEAP_SECOND = re.compile(r"(\d\d:\d\d):60(\.\d+)?([Zz]|[+-]\d\d:\d\d)\Z", re.ASCII)
_LEAP_SECOND_OFFSETS = dict(leap_second_times())


def _with_leap_seconds(check: Callable[[Any], bool], raises: Any) -> Callable[[Any], bool]:
    """``check``, also true for a leap second: the same text with second 59 passes ``check`` and
    its offset makes the local time 23:59 UTC (:func:`~grammask.schemas.formats.leap_second_times`)."""

    def passes(instance: Any) -> bool:
        try:
            return bool(check(instance))
        except raises:
            return False

    def check_with_leap_seconds(instance: Any) -> bool:
        if passes(instance):
            return True
        found = _LEAP_SECOND.search(instance) if isinstance(instance, str) else None
        if found is None or found[3] not in _LEAP_SECOND_OFFSETS.get(found[1], ()):
            return False
        return passes(instance[: found.end(1)] + ":59" + instance[found.end(1) + 3 :])

    return check_with_leap_seconds
