"""Reading schema corpora into :class:`Case` records, sampling them, and the schema facts the report needs.

Three line formats are read (JSON Lines, one object a line; see ``shared/corpora/README.md``):

- test-suite groups: ``{"id", "file", "schema", "tests": [{"description", "data", "valid"}]}``;
  ``format`` is asserted only for groups under ``optional/format/`` (the suite's own rule);
- JSONSchemaBench schemas ``{"id", "dataset", "schema"}``, joined by ``id`` with the instances file
  of the same name in the sibling ``instances/`` folder (``format`` asserted, as its labels assume);
- schema-only files: the same schema lines with no instances file found.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grammask.errors import InvalidParameterError
from grammask.schemas.normalize import draft_of, undefined_keywords, without_keywords
from grammask.schemas.resolve import subschemas


@dataclass(frozen=True)
class Instance:
    description: str
    data: Any
    valid: bool


@dataclass
class Case:
    """One schema with its labelled instances (none for schema-only corpora).

    Attributes:
        id: the record id (unique within its corpus).
        corpus: the corpus name shown in reports (``"test-suite"`` or the dataset name).
        schema: the schema (key order as in the file).
        instances: the labelled instances.
        format_asserted: whether the labels treat ``format`` as an assertion.
    """

    id: str
    corpus: str
    schema: Any
    instances: list[Instance] = field(default_factory=list)
    format_asserted: bool = True


def _read_jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidParameterError("corpus", f"{path}:{number}", f"JSON Lines ({exc.msg})") from None


def _instances(tests: list[dict]) -> list[Instance]:
    return [Instance(str(t.get("description", "")), t["data"], bool(t["valid"])) for t in tests]


def instances_file_for(schemas_path: Path) -> Path | None:
    """The JSONSchemaBench instances file that goes with a schemas file (``../instances/<same name>``)."""
    candidate = schemas_path.parent.parent / "instances" / schemas_path.name
    return candidate if candidate.is_file() and candidate.resolve() != schemas_path.resolve() else None


def read_corpus(path: str | Path) -> list[Case]:
    """Every case of one corpus file (format detected from its first record)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidParameterError("corpus", str(path), "an existing JSON Lines file")
    records = list(_read_jsonl(path))
    if not records:
        return []
    first = records[0]
    if "schema" not in first:
        raise InvalidParameterError("corpus", str(path), "records with a 'schema' field (a schemas file, not instances)")
    if "tests" in first:  # test-suite groups
        return [
            Case(
                r["id"],
                "test-suite",
                r["schema"],
                _instances(r["tests"]),
                format_asserted=str(r.get("file", "")).startswith("optional/format/"),
            )
            for r in records
        ]
    tests: dict[str, list[dict]] = {}
    instances_path = instances_file_for(path)
    if instances_path is not None:
        tests = {r["id"]: r["tests"] for r in _read_jsonl(instances_path)}
    default_corpus = path.name.split(".")[0]
    return [
        Case(r["id"], r.get("dataset", default_corpus), r["schema"], _instances(tests.get(r["id"], [])))
        for r in records
    ]


def sample(cases: list[Case], limit: int | None, seed: int = 0) -> list[Case]:
    """At most ``limit`` cases, chosen deterministically by hashing ``seed`` and the id (file order kept)."""
    if limit is None or len(cases) <= limit:
        return cases

    def rank(case: Case) -> str:
        return hashlib.sha256(f"{seed}:{case.id}".encode()).hexdigest()

    chosen = {c.id for c in sorted(cases, key=rank)[:limit]}
    return [c for c in cases if c.id in chosen]


# Assertion and applicator keywords of drafts 4 to 2020-12 (unknown keys are ignored, as validators do).
KNOWN_KEYWORDS = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "contentEncoding", "contentMediaType", "contentSchema",
    "items", "additionalItems", "prefixItems", "maxItems", "minItems", "uniqueItems", "contains",
    "maxContains", "minContains", "unevaluatedItems", "properties", "patternProperties",
    "additionalProperties", "maxProperties", "minProperties", "required", "dependentRequired",
    "dependentSchemas", "dependencies", "propertyNames", "unevaluatedProperties", "allOf", "anyOf",
    "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef",
}


def keywords(schema: Any) -> set[str]:
    """The JSON Schema keywords used anywhere in ``schema`` (annotations, ``$defs`` containers,
    unknown keys and keywords its draft does not define left out, with what is inside them), plus
    ``format:<name>`` per format used.

    Property names, ``enum``/``const`` values and other data are not keywords.
    """
    found: set[str] = set()
    for _, node in subschemas(without_keywords(schema, undefined_keywords(draft_of(schema)))):
        if isinstance(node, dict):
            found.update(key for key in node if key in KNOWN_KEYWORDS)
            if isinstance(node.get("format"), str):
                found.add(f"format:{node['format']}")
    return found


def declared_order(instance: Any, schema: Any, root: Any = None, depth: int = 0) -> Any:
    """``instance`` with object keys reordered into ``schema``'s declared ``properties`` order
    (declared names first, in declaration order, then the others as given), recursively through
    ``properties``, ``items``/``prefixItems``, ``allOf`` and local ``$ref``\\ s.

    This is the order a grammar that fixes property order expects; keys the schema does not declare
    keep their relative order.
    """
    root = schema if root is None else root
    if depth > 32 or not isinstance(schema, dict):
        return instance
    schema = _merged(schema, root)
    if isinstance(instance, dict):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        names = [n for n in props if n in instance] + [n for n in instance if n not in props]
        return {n: declared_order(instance[n], props.get(n, {}), root, depth + 1) for n in names}
    if isinstance(instance, list):
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        items = schema.get("items")
        if isinstance(items, list):  # draft-04 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        return [
            declared_order(v, prefix[i] if i < len(prefix) else (items or {}), root, depth + 1)
            for i, v in enumerate(instance)
        ]
    return instance


def _merged(schema: dict, root: Any) -> dict:
    """``schema`` with its local ``$ref`` target and ``allOf`` members' ``properties`` folded in."""
    merged = dict(schema)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target = _pointer(root, ref[1:])
        if isinstance(target, dict):
            merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    for sub in merged.get("allOf", []) if isinstance(merged.get("allOf"), list) else []:
        if isinstance(sub, dict) and isinstance(sub.get("properties"), dict):
            props = dict(merged.get("properties") or {})
            for name, value in sub["properties"].items():
                props.setdefault(name, value)
            merged["properties"] = props
    return merged


def _pointer(root: Any, pointer: str) -> Any:
    node = root
    for part in [p for p in pointer.split("/") if p != ""]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
