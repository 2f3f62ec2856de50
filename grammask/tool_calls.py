"""Tool calls in each model family's own format, as structural tags.

A :class:`ToolCallFormat` says how one family writes a call (the text or special tokens around it,
where the function's name and its JSON arguments go, what separates parallel calls); from the
tools of a request and its ``tool_choice``, :func:`tool_call_spec` builds the
:class:`~grammask.grammars.spec.StructuralTag` that allows exactly those outputs:

- ``"auto"``: text, or calls (the families that open calls with a special token also allow text
  before them); arguments always follow the called tool's schema.
- ``"required"``: one or more calls and nothing else (exactly one without ``parallel``).
- a tool's name: exactly one call of that tool.

Each argument object is a :class:`~grammask.grammars.spec.JsonSchema` of the tool's ``parameters``
(flexible whitespace, JSON Schema semantics; ``strict`` tools also get no properties their schema
does not list), so what the backend does not enforce shows in the compiled grammar's
``unenforced``. Special tokens a format needs are ``token`` elements: allowed exactly there.

Formats (``TOOL_CALL_FORMATS``):

========================  ==========================================================================
``llama3_json``           Llama-3.1 / 3.2: ``<|python_tag|>`` (optional) then ``{"name": "f", "parameters": {...}}``, ``; `` between calls
``hermes``                Hermes-2/3, Qwen2.5, Qwen3: ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``, ``\\n`` between calls
``deepseek_v3``           DeepSeek-V3 / R1: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``…``<｜tool▁calls▁end｜>``
``mistral``               Mistral (tokenizers before v11): ``[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]``
========================  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from grammask.checks import as_bool, check_instance
from grammask.errors import InvalidParameterError
from grammask.grammars.spec import JsonSchema, StructuralTag, Whitespace

__all__ = ["TOOL_CALL_FORMATS", "Tool", "ToolCallFormat", "tool_call_format", "tool_call_spec", "tool_call_tree"]

NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}
"""The arguments of a function that declares no ``parameters``: an empty object."""


@dataclass(frozen=True)
class Tool:
    """One function a request offers: its name, the JSON Schema of its arguments, and OpenAI's ``strict``."""

    name: str
    parameters: Mapping[str, Any]
    strict: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError("Tool.name", self.name, "the function's name, a non-empty string")
        check_instance("Tool.parameters", self.parameters, Mapping, "the JSON Schema of the arguments (an object)")
        as_bool("Tool.strict", self.strict)

    def arguments_spec(self) -> JsonSchema:
        return JsonSchema(dict(self.parameters), whitespace=Whitespace.FLEXIBLE, strict=self.strict)


@dataclass(frozen=True)
class ToolCallFormat:
    """How a model family writes tool calls.

    A call is ``call_open`` (one special token, or ``None``), then ``name_prefix + name + name_suffix``
    as text, the arguments, then ``call_close`` text, then ``call_end`` (one special token or ``None``).
    Parallel calls are joined by ``separator``. The whole list may be wrapped in ``list_open`` /
    ``list_close`` (text, or a special token written ``<token:TEXT>``) and preceded by the optional
    special token ``optional_prefix``. ``text_before_calls``: whether free text may precede the calls
    under ``tool_choice="auto"``.
    """

    name: str
    call_open: str | None
    name_prefix: str
    name_suffix: str
    call_close: str
    call_end: str | None
    separator: str
    list_open: tuple[str, ...] = ()
    list_close: tuple[str, ...] = ()
    optional_prefix: str | None = None
    text_before_calls: bool = True
    trigger: str = ""

    def call(self, tool: Tool) -> dict[str, Any]:
        elements: list[Any] = []
        if self.call_open:
            elements.append(_token(self.call_open))
        elements.append(_text(self.name_prefix + tool.name + self.name_suffix))
        elements.append(tool.arguments_spec())
        if self.call_close:
            elements.append(_text(self.call_close))
        if self.call_end:
            elements.append(_token(self.call_end))
        return _sequence(elements)

    def calls(self, tools: Sequence[Tool], parallel: bool) -> dict[str, Any]:
        one = self.call(tools[0]) if len(tools) == 1 else {"type": "or", "elements": [self.call(t) for t in tools]}
        body = one
        if parallel:
            more = {"type": "star", "content": _sequence([_text(self.separator), one]) if self.separator else one}
            body = _sequence([one, more])
        elements: list[Any] = []
        if self.optional_prefix:
            elements.append({"type": "optional", "content": _token(self.optional_prefix)})
        elements.extend(_marker(m) for m in self.list_open)
        elements.append(body)
        elements.extend(_marker(m) for m in self.list_close)
        return _sequence(elements)


def _text(value: str) -> dict[str, Any]:
    return {"type": "const_string", "value": value}


def _token(text: str) -> dict[str, Any]:
    return {"type": "token", "token": text}


def _marker(value: str) -> dict[str, Any]:
    prefix = "<token:"
    return _token(value[len(prefix) : -1]) if value.startswith(prefix) else _text(value)


def _sequence(elements: list[Any]) -> dict[str, Any]:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {
    "llama3_json": ToolCallFormat(
        name="llama3_json",
        call_open=None,
        name_prefix='{"name": "',
        name_suffix='", "parameters": ',
        call_close="}",
        call_end=None,
        separator="; ",
        optional_prefix="<|python_tag|>",
        text_before_calls=False,
        trigger='{"name"',
    ),
    "hermes": ToolCallFormat(
        name="hermes",
        call_open="<tool_call>",
        name_prefix='\n{"name": "',
        name_suffix='", "arguments": ',
        call_close="}\n",
        call_end="</tool_call>",
        separator="\n",
        trigger="<tool_call>",
    ),
    "deepseek_v3": ToolCallFormat(
        name="deepseek_v3",
        call_open="<｜tool▁call▁begin｜>",
        name_prefix="function<｜tool▁sep｜>",
        name_suffix="\n```json\n",
        call_close="\n```",
        call_end="<｜tool▁call▁end｜>",
        separator="\n",
        list_open=("<token:<｜tool▁calls▁begin｜>>",),
        list_close=("<token:<｜tool▁calls▁end｜>>",),
        trigger="<｜tool▁calls▁begin｜>",
    ),
    "mistral": ToolCallFormat(
        name="mistral",
        call_open=None,
        name_prefix='{"name": "',
        name_suffix='", "arguments": ',
        call_close="}",
        call_end=None,
        separator=", ",
        list_open=("<token:[TOOL_CALLS]>", "["),
        list_close=("]",),
        trigger="[TOOL_CALLS]",
    ),
}
"""The tool-call formats by name. Aliases: ``qwen2.5``, ``qwen3`` → ``hermes``; ``llama3.1``,
``llama3.2`` → ``llama3_json``; ``deepseek_r1`` → ``deepseek_v3``."""

_ALIASES = {
    "qwen2.5": "hermes",
    "qwen3": "hermes",
    "llama3.1": "llama3_json",
    "llama3.2": "llama3_json",
    "deepseek_r1": "deepseek_v3",
}


def tool_call_format(name: str | ToolCallFormat) -> ToolCallFormat:
    """The format called ``name`` (or an alias), or ``name`` itself when it is a format."""
    if isinstance(name, ToolCallFormat):
        return name
    found = TOOL_CALL_FORMATS.get(_ALIASES.get(name, name)) if isinstance(name, str) else None
    if found is None:
        known = sorted([*TOOL_CALL_FORMATS, *_ALIASES])
        raise InvalidParameterError("tool_format", name, f"one of {known}")
    return found


def tool_call_spec(
    tools: Sequence[Tool],
    tool_format: str | ToolCallFormat,
    *,
    choice: str = "auto",
    parallel: bool = True,
) -> StructuralTag:
    """The structural tag of a reply that may (``"auto"``) or must (``"required"``, or a tool's
    name: that tool, once) call ``tools`` in ``tool_format``.

    Raises:
        InvalidParameterError: no tools, an unknown format or choice, or a name no tool has.
    """
    return StructuralTag.from_format(tool_call_tree(tools, tool_format, choice=choice, parallel=parallel))


def tool_call_tree(
    tools: Sequence[Tool], tool_format: str | ToolCallFormat, *, choice: str = "auto", parallel: bool = True
) -> dict[str, Any]:
    """The format tree of :func:`tool_call_spec` (argument schemas as :class:`JsonSchema` leaves),
    to combine with other elements."""
    form = tool_call_format(tool_format)
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence) or not tools:
        raise InvalidParameterError("tools", tools, "a non-empty list of Tool")
    for i, tool in enumerate(tools):
        check_instance(f"tools[{i}]", tool, Tool, "a grammask Tool")
    as_bool("parallel", parallel)
    if not isinstance(choice, str):
        raise InvalidParameterError("choice", choice, "'auto', 'required' or a tool's name")
    if choice == "auto":
        calls = form.calls(tools, parallel)
        text = {"type": "any_text", "excludes": [form.trigger]}
        if form.text_before_calls:
            tree = _sequence([text, {"type": "optional", "content": calls}])
        else:
            tree = {"type": "or", "elements": [calls, text]}
    elif choice == "required":
        tree = form.calls(tools, parallel)
    else:
        named = [t for t in tools if t.name == choice]
        if not named:
            raise InvalidParameterError("tool_choice", choice, f"'auto', 'required' or one of the tools {[t.name for t in tools]}")
        tree = form.calls(named[:1], parallel=False)
    return tree
