"""Resolving ``$ref`` inside one schema document: JSON pointers, ``$id`` bases, ``$anchor`` names.

Only references that land inside the document are resolved (the document's own ``$id`` and the
``$id`` of any subschema, ``#`` fragments that are JSON pointers or anchors). A reference to
anything else (a remote URL, a meta-schema) raises :class:`UnsupportedFeatureError`; a fragment
that does not exist raises :class:`InvalidSchemaError`. Draft-04's ``id`` is read like ``$id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin as _urljoin, urlsplit

from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.schemas.validate import REFERENCE_KEYWORDS, json_pointer

_DEFAULT_BASE = "https://grammask.invalid/root.json"


def urljoin(base: str, ref: str, where: tuple = ()) -> str:
    """RFC 3986 reference resolution that also works on ``urn:`` bases (fragments, absolute refs).

    Raises:
        InvalidSchemaError: ``ref`` is no URI reference (``http://[x``), at ``where`` (a path).
    """
    if not ref:
        return base
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    try:
        return ref if urlsplit(ref).scheme else _urljoin(base, ref)
    except ValueError as error:  # urllib's own reading: an unclosed IPv6 host, a bad port
        raise InvalidSchemaError(f"{ref!r} is not a URI reference ({error})", json_pointer(where)) from None

# Keywords whose value is a schema, a list of schemas, or a map of schemas: the places a
# subschema (and so an ``$id`` or ``$anchor``) can live.
SCHEMA_KEYWORDS = frozenset(
    "additionalProperties additionalItems items contains not if then else propertyNames "
    "unevaluatedProperties unevaluatedItems contentSchema".split()
)
SCHEMA_LIST_KEYWORDS = frozenset("allOf anyOf oneOf prefixItems items".split())
SCHEMA_MAP_KEYWORDS = frozenset("properties patternProperties $defs definitions dependentSchemas dependencies".split())


def escape_pointer_token(token: str) -> str:
    """One reference token of an RFC 6901 pointer (``~`` → ``~0``, ``/`` → ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape_pointer_token(token: str) -> str:
    """The inverse of :func:`escape_pointer_token`."""
    return token.replace("~1", "/").replace("~0", "~")


def subschemas(schema: Any, path: tuple = ()):
    """Yield ``(path, subschema)`` for ``schema`` and every schema nested in it, pre-order.

    ``path`` is a tuple of keys and indices from the root. Values of ``enum``, ``const``,
    ``default`` and ``examples`` are data, not schemas, and are not entered.
    """
    yield path, schema
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, (dict, bool)):
                    yield from subschemas(sub, path + (key, name))
        elif key in SCHEMA_LIST_KEYWORDS and isinstance(value, list):
            for index, sub in enumerate(value):
                yield from subschemas(sub, path + (key, index))
        elif key in SCHEMA_KEYWORDS and isinstance(value, (dict, bool)):
            yield from subschemas(value, path + (key,))


@dataclass(frozen=True)
class Target:
    """Where a reference lands: the subschema, the base URI in force there, and its pointer."""

    schema: Any
    base: str
    path: tuple


class Resolver:
    """Resolves the references of one schema document.

    Args:
        root: the schema document (a dict or a bool).
    """

    def __init__(self, root: Any) -> None:
        self.root = root
        self.root_base = _DEFAULT_BASE
        self._by_uri: dict[str, Target] = {}
        self._bases: dict[int, str] = {}
        self._documents: dict[str, str] = {}  # a base URI → its document's (the base without a fragment)
        self.references: list[tuple[str, str, dict, tuple]] = []
        """``(keyword, reference, subschema, path)`` of every reference of the document, pre-order."""
        self._index(root, _DEFAULT_BASE, ())

    def _index(self, schema: Any, base: str, path: tuple) -> None:
        if isinstance(schema, dict):
            ident = schema.get("$id", schema.get("id") if isinstance(schema.get("id"), str) else None)
            if isinstance(ident, str) and not ident.startswith("#"):
                base = urljoin(base, ident, path + ("$id" if "$id" in schema else "id",))
                base = urldefrag(base)[0]
                if not path:
                    self.root_base = base
                self._by_uri.setdefault(base, Target(schema, base, path))
            elif isinstance(ident, str) and ident.startswith("#") and len(ident) > 1:
                self._by_uri.setdefault(urljoin(base, ident), Target(schema, base, path))
            anchor = schema.get("$anchor")
            if isinstance(anchor, str):
                self._by_uri.setdefault(f"{base}#{anchor}", Target(schema, base, path))
            dyn = schema.get("$dynamicAnchor")
            if isinstance(dyn, str):
                self._by_uri.setdefault(f"{base}#{dyn}", Target(schema, base, path))
            self._bases[id(schema)] = base
            for keyword in REFERENCE_KEYWORDS:
                ref = schema.get(keyword)
                if isinstance(ref, str):
                    self.references.append((keyword, ref, schema, path))
            for key, value in schema.items():
                if key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
                    for name, sub in value.items():
                        self._index(sub, base, path + (key, name))
                elif key in SCHEMA_LIST_KEYWORDS and isinstance(value, list):
                    for index, sub in enumerate(value):
                        self._index(sub, base, path + (key, index))
                elif key in SCHEMA_KEYWORDS:
                    self._index(value, base, path + (key,))
        if not path:
            self._by_uri.setdefault(base, Target(schema, base, path))

    def base_of(self, schema: Any, default: str | None = None) -> str:
        """The base URI in force at ``schema`` (an object of this document)."""
        return self._bases.get(id(schema), default or self.root_base)

    def resolve(self, ref: str, base: str, where: tuple = ()) -> Target:
        """The target of ``ref`` written in a schema whose base URI is ``base``.

        Raises:
            UnsupportedFeatureError: the reference leaves the document.
            InvalidSchemaError: the reference points at nothing.
        """
        if ref.startswith("#"):  # the usual reference, within the base's document: no URI parsing but once per base
            document_uri = self._documents.get(base)
            if document_uri is None:
                document_uri = self._documents[base] = urldefrag(base)[0]
            fragment = ref[1:]
        else:
            document_uri, fragment = urldefrag(urljoin(base, ref, where))
        target = self._by_uri.get(document_uri)
        if target is None:
            raise UnsupportedFeatureError("$ref", json_pointer(where), "fsm", f"remote reference {ref!r}")
        if not fragment:
            return target
        if fragment.startswith("/"):
            return self._follow_pointer(target, unquote(fragment), ref, where)
        found = self._by_uri.get(f"{document_uri}#{fragment}")
        if found is None:
            raise InvalidSchemaError(f"$ref {ref!r}: no anchor {fragment!r}", json_pointer(where))
        return found

    def _follow_pointer(self, start: Target, pointer: str, ref: str, where: tuple) -> Target:
        node, path, base = start.schema, start.path, start.base
        for raw in pointer.split("/")[1:]:
            token = unescape_pointer_token(raw)
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                token = int(token)
                node = node[token]
            else:
                raise InvalidSchemaError(f"$ref {ref!r} points at nothing", json_pointer(where))
            path = path + (token,)
            if isinstance(node, dict):
                base = self._bases.get(id(node), base)
        return Target(node, base, path)


_last_resolver: tuple[Any, Resolver] | None = None


def resolver_of(document: Any) -> Resolver:
    """The :class:`Resolver` of ``document``, the one made last when it was for this very object
    (the meta-schema check and the lowering of one compile read one parse: one index). Its
    readers never modify it. Keyed by identity: a race between threads only builds one more
    index. The last document stays alive until another is indexed."""
    global _last_resolver
    last = _last_resolver
    if last is not None and last[0] is document:
        return last[1]
    resolver = Resolver(document)
    _last_resolver = (document, resolver)
    return resolver


def check_references(schema: Any) -> None:
    """Raise unless every reference of ``schema`` resolves inside the document itself or to a published
    meta-schema that ships with ``jsonschema`` (nothing is ever fetched: a reference to anything else,
    ``http://`` or ``file://``, would make a validator fetch it).

    Raises:
        UnsupportedFeatureError: a reference leaves the document (``feature`` is the keyword, ``path``
            the JSON pointer of the schema that holds it, ``backend`` ``"grammask"``: no backend fetches).
        InvalidSchemaError: a reference lands nowhere inside the document.
    """
    if not isinstance(schema, dict):
        return
    resolver = resolver_of(schema)
    for keyword, ref, subschema, path in resolver.references:
        _check_reference(resolver, keyword, ref, resolver.base_of(subschema), path)


def _check_reference(resolver: Resolver, keyword: str, ref: str, base: str, path: tuple) -> None:
    try:
        resolver.resolve(ref, base, path)
    except UnsupportedFeatureError:
        if _is_bundled_meta_schema(urljoin(base, ref, path)):
            return
        raise UnsupportedFeatureError(
            keyword, json_pointer(path), "grammask",
            f"reference {ref!r} leaves the schema, and grammask never fetches one (put it under $defs)",
        ) from None


def _is_bundled_meta_schema(uri: str) -> bool:
    import jsonschema_specifications  # the meta-schemas of every draft, shipped with jsonschema
    from referencing.exceptions import NoSuchResource

    try:
        jsonschema_specifications.REGISTRY.contents(urldefrag(uri)[0])
    except NoSuchResource:
        return False
    return True


__all__ = [
    "Resolver",
    "Target",
    "check_references",
    "resolver_of",
    "escape_pointer_token",
    "subschemas",
    "unescape_pointer_token",
]
