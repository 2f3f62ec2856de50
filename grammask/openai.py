"""OpenAI-style requests to grammask specs: :func:`spec_from_request`.

One chat-completions request body (a dict, as JSON would give it) says what its output must obey
through these fields, all read here:

- ``response_format``: ``{"type": "text"}`` (nothing), ``{"type": "json_object"}`` (any JSON
  object), ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``, and vLLM's
  ``{"type": "structural_tag", ...}`` (a format tree, or the legacy ``structures`` + ``triggers``).
- ``tools`` + ``tool_choice`` (``"none"``, ``"auto"``, ``"required"``, or ``{"type": "function",
  "function": {"name": ...}}``) + ``parallel_tool_calls``: calls written in the model family's own
  format (``tool_format``, see ``grammask.tool_calls``), arguments following each tool's schema.
- vLLM's ``structured_outputs`` object: exactly one of ``json``, ``regex``, ``choice``, ``grammar``
  (GBNF), ``structural_tag``, ``json_object``.

``strict`` (of a response schema or a tool) makes objects that do not say ``additionalProperties``
closed (``JsonSchema.strict``); without it the schema keeps JSON Schema's meaning. Either way the
schema is enforced (what a backend cannot enforce is listed in the compiled grammar's
``unenforced``). A request that a reasoning model answers (``reasoning="qwen3"`` or
``"deepseek_r1"``) gets a free think section before the constraint.

A bad request raises :class:`~grammask.errors.InvalidParameterError` whose ``field`` names the place,
such as ``tools[1].function.parameters`` or ``response_format.json_schema.schema``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from grammask.checks import as_bool, as_enum
from grammask.errors import InvalidGrammarError, InvalidParameterError, InvalidSchemaError
from grammask.grammars.spec import Ebnf, JsonSchema, Reasoning, Regex, Spec, StructuralTag, Tag, Whitespace
from grammask.schemas.validate import check_schema
from grammask.tool_calls import NO_PARAMETERS, Tool, ToolCallFormat, tool_call_tree

__all__ = ["spec_from_request"]

STRUCTURED_OUTPUT_FIELDS = ("json", "regex", "choice", "grammar", "structural_tag", "json_object")
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_REGEX_SYNTAX = set("\\^$.|?*+()[]{}/")


def spec_from_request(
    body: Mapping[str, Any],
    *,
    tool_format: str | ToolCallFormat | None = None,
    reasoning: str | None = None,
    whitespace: Whitespace | str = Whitespace.COMPACT,
) -> Spec | None:
    """The spec a chat-completions request's output must obey, or ``None`` when it asks for none.

    Args:
        body: the request (``response_format``, ``tools``, ``tool_choice``, ``parallel_tool_calls``,
            ``structured_outputs``; other fields are ignored).
        tool_format: how the model writes tool calls (``grammask.TOOL_CALL_FORMATS``);
            needed when the request lets the model call tools.
        reasoning: the model's think section (``"qwen3"``, ``"deepseek_r1"``), free before the
            constraint; ``None`` for models that answer at once.
        whitespace: where JSON from ``response_format`` and ``structured_outputs`` may hold whitespace.

    Returns:
        a :class:`JsonSchema`, :class:`Regex`, :class:`Ebnf` or :class:`StructuralTag` (wrapped in
        :class:`Reasoning` with ``reasoning``), or ``None``.

    Raises:
        InvalidParameterError: a malformed field (its ``field`` says which), two constraints at once,
            or tools without a ``tool_format``.
        InvalidSchemaError, InvalidGrammarError: a schema or structural tag that does not parse.
    """
    if not isinstance(body, Mapping):
        raise InvalidParameterError("request", type(body).__name__, "a JSON object (dict)")
    whitespace = as_enum("whitespace", whitespace, Whitespace)
    content = _content_spec(body, whitespace)
    spec = _with_tools(body, content, tool_format)
    if spec is None or reasoning is None:
        return spec
    return Reasoning.for_model(reasoning, spec)


# ------------------------------------------------------------------------------------------ content


def _content_spec(body: Mapping[str, Any], whitespace: Whitespace) -> JsonSchema | Regex | Ebnf | StructuralTag | None:
    from_format = _response_format_spec(body.get("response_format"), whitespace)
    from_outputs = _structured_outputs_spec(body.get("structured_outputs"), whitespace)
    if from_format is not None and from_outputs is not None:
        raise InvalidParameterError("structured_outputs", "both response_format and structured_outputs", "at most one of them")
    return from_format if from_format is not None else from_outputs


def _response_format_spec(value: Any, whitespace: Whitespace) -> JsonSchema | StructuralTag | None:
    if value is None:
        return None
    where = "response_format"
    _require_object(value, where)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonSchema({"type": "object"}, whitespace=whitespace)
    if kind == "json_schema":
        described = value.get("json_schema")
        _require_object(described, f"{where}.json_schema")
        schema = described.get("schema", described.get("json_schema"))
        if not isinstance(schema, (dict, bool)):
            raise InvalidParameterError(f"{where}.json_schema.schema", schema, "a JSON Schema (an object or a boolean)")
        strict = _optional_bool(f"{where}.json_schema.strict", described.get("strict"), default=False)
        return _located(f"{where}.json_schema.schema", lambda: JsonSchema(schema, whitespace=whitespace, strict=strict))
    if kind == "structural_tag":
        return _structural_tag(value, where)
    raise InvalidParameterError(f"{where}.type", kind, "'text', 'json_object', 'json_schema' or 'structural_tag'")


def _structured_outputs_spec(value: Any, whitespace: Whitespace) -> JsonSchema | Regex | Ebnf | StructuralTag | None:
    if value is None:
        return None
    where = "structured_outputs"
    _require_object(value, where)
    given = [name for name in STRUCTURED_OUTPUT_FIELDS if value.get(name) is not None]
    if len(given) != 1:
        raise InvalidParameterError(where, given, f"exactly one of {', '.join(STRUCTURED_OUTPUT_FIELDS)}")
    name = given[0]
    field, item = f"{where}.{name}", value[name]
    if name == "json":
        schema = _parse_json(item, field) if isinstance(item, str) else item
        return _located(field, lambda: JsonSchema(schema, whitespace=whitespace))
    if name == "json_object":
        if item is not True:
            raise InvalidParameterError(field, item, "true (omit the field for no constraint)")
        return JsonSchema({"type": "object"}, whitespace=whitespace)
    if name == "regex":
        if not isinstance(item, str):
            raise InvalidParameterError(field, item, "a regular expression (a string)")
        return Regex(item)
    if name == "choice":
        return _choice(item, field)
    if name == "grammar":
        if not isinstance(item, str) or "::=" not in item:
            raise InvalidParameterError(field, item, "a GBNF grammar ('root ::= ...'); Lark grammars are not supported")
        return _located(field, lambda: Ebnf(item))
    tag = _parse_json(item, field) if isinstance(item, str) else item
    _require_object(tag, field)
    return _structural_tag(tag, field)


def _choice(item: Any, field: str) -> Regex:
    if isinstance(item, str):
        item = _parse_json(item, field)
    if not isinstance(item, list) or not item or not all(isinstance(c, str) for c in item):
        raise InvalidParameterError(field, item, "a non-empty list of strings")
    return Regex("(?:" + "|".join("".join("\\" + ch if ch in _REGEX_SYNTAX else ch for ch in c) for c in item) + ")")


def _structural_tag(value: Mapping[str, Any], where: str) -> StructuralTag:
    if "structures" in value:
        structures, triggers = value.get("structures"), value.get("triggers")
        if not isinstance(structures, list) or not structures:
            raise InvalidParameterError(f"{where}.structures", structures, "a non-empty list of {begin, schema, end}")
        if not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers):
            raise InvalidParameterError(f"{where}.triggers", triggers, "a list of strings")
        tags = []
        for i, item in enumerate(structures):
            place = f"{where}.structures[{i}]"
            _require_object(item, place)
            if not isinstance(item.get("begin"), str) or not isinstance(item.get("end"), str):
                raise InvalidParameterError(place, item, "an object with string 'begin' and 'end'")
            schema = item.get("schema", {})
            tags.append(_located(place, lambda: Tag(item["begin"], JsonSchema(schema), item["end"])))
        return _located(where, lambda: StructuralTag(tags, triggers))
    tree = value.get("format", value)
    return _located(f"{where}.format", lambda: StructuralTag.from_format(tree))


# ------------------------------------------------------------------------------------------ tools


def _with_tools(body: Mapping[str, Any], content: Any, tool_format: str | ToolCallFormat | None) -> Spec | None:
    tools = _tools(body.get("tools"))
    choice = _tool_choice(body.get("tool_choice"), tools)
    if choice == "none":
        return content
    parallel = _optional_bool("parallel_tool_calls", body.get("parallel_tool_calls"), default=True)
    if tool_format is None:
        raise InvalidParameterError("tool_format", None, "the model's tool-call format (see grammask.tool_calls.TOOL_CALL_FORMATS) for a request with tools")
    if choice == "auto" and content is not None:
        if isinstance(content, StructuralTag):
            raise InvalidParameterError("tools", "tools with a structural tag", "tools, or a structural_tag, not both")
        calls = tool_call_tree(tools, tool_format, choice="required", parallel=parallel)
        return StructuralTag.from_format({"type": "or", "elements": [calls, content]})
    return StructuralTag.from_format(tool_call_tree(tools, tool_format, choice=choice, parallel=parallel))


def _tools(value: Any) -> list[Tool]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidParameterError("tools", value, "a list of {'type': 'function', 'function': {...}}")
    tools = []
    for i, item in enumerate(value):
        where = f"tools[{i}]"
        _require_object(item, where)
        if item.get("type", "function") != "function":
            raise InvalidParameterError(f"{where}.type", item.get("type"), "'function'")
        function = item.get("function")
        _require_object(function, f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            raise InvalidParameterError(f"{where}.function.name", name, "1 to 64 letters, digits, '_' or '-'")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = NO_PARAMETERS
        if not isinstance(parameters, dict):
            raise InvalidParameterError(f"{where}.function.parameters", parameters, "a JSON Schema object")
        strict = _optional_bool(f"{where}.function.strict", function.get("strict"), default=False)
        tool = Tool(name, parameters, strict)
        _located(f"{where}.function.parameters", tool.arguments_spec)
        tools.append(tool)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InvalidParameterError("tools", names, "distinct function names")
    return tools


def _tool_choice(value: Any, tools: list[Tool]) -> str:
    if value is None:
        return "auto" if tools else "none"
    if value in ("none", "auto", "required"):
        if value != "none" and not tools:
            raise InvalidParameterError("tool_choice", value, "'none' when the request has no tools")
        return value
    if isinstance(value, Mapping) and value.get("type", "function") == "function" and isinstance(value.get("function"), Mapping):
        name = value["function"].get("name")
        if name not in [t.name for t in tools]:
            raise InvalidParameterError("tool_choice.function.name", name, f"one of the request's tools {[t.name for t in tools]}")
        return name
    raise InvalidParameterError("tool_choice", value, "'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}")


# ------------------------------------------------------------------------------------------ helpers


def _require_object(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise InvalidParameterError(where, value, "a JSON object")


def _optional_bool(where: str, value: Any, *, default: bool) -> bool:
    """A JSON boolean field: ``default`` when absent or null."""
    return default if value is None else as_bool(where, value)


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidParameterError(where, text[:80], f"JSON ({exc.msg} at character {exc.pos})") from None


def _located(where: str, build: Any) -> Any:
    """``build()``, its JSON Schemas checked against their meta-schemas, with an error from inside
    it naming the request field ``where``."""
    try:
        spec = build()
        for schema_spec in _schemas_of(spec):
            check_schema(schema_spec.schema)
        return spec
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{where}.{exc.field}" if exc.field else where, exc.value, exc.allowed) from None
    except InvalidSchemaError as exc:
        raise InvalidSchemaError(f"{where}: {exc.reason}", exc.pointer) from None
    except InvalidGrammarError as exc:
        raise InvalidGrammarError(f"{where}: {exc.reason}", exc.line, exc.column) from None


def _schemas_of(spec: Any) -> list[JsonSchema]:
    if isinstance(spec, JsonSchema):
        return [spec]
    if isinstance(spec, StructuralTag):
        return [c for c in spec.contents if isinstance(c, JsonSchema)]
    if isinstance(spec, Tag):
        return _schemas_of(spec.content)
    return []
