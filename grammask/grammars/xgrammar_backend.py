"""The xgrammar backend: JSON Schema, regex, EBNF and structural tags through xgrammar's C++ engine.

Four xgrammar behaviours (measured with xgrammar 0.2.8) do not leak through this wrapper:

* **Special tokens.** xgrammar's own tokenizer detection finds no special token in the Llama-3.2
  ``tokenizer.json``, so ``<|eot_id|>`` would be allowed inside JSON strings. We build xgrammar's
  tokenizer from :class:`~grammask.tokenizer.TokenizerInfo`, handing every special id to it as an
  empty token, which xgrammar never allows.
* **String lengths.** For ``minLength`` / ``maxLength`` xgrammar emits a character rule that accepts
  raw control bytes (invalid JSON). We take xgrammar's EBNF for the schema and replace that rule with
  one that excludes them. Escapes stay out of length-bounded strings: a rule that allows them
  compiles fast but then costs 60-120 ms per mask inside such strings (measured; a right-recursive
  bounded rule instead costs 11 s to compile for ``maxLength: 60``), so the grammar is narrower than
  the schema there and says so in ``narrowed``. The ``fsm`` backend has neither cost.
* **Separators of free values.** In compact mode xgrammar still writes ``", "`` between the items of
  values the schema leaves free (``{}``, additional properties), so ``json.dumps(x,
  separators=(",", ":"))`` of such values was rejected; the separator is repaired.
* **Keywords without ``type``.** With ``properties``, ``required`` or ``items`` but no ``type``,
  xgrammar rejects every non-object / non-array value, though JSON Schema accepts them. Such a
  schema is split into one ``anyOf`` branch per type before xgrammar sees it.
* **String spellings.** xgrammar accepts any escape (``\\u0061`` for ``a``, ``\\/``), and keeps
  other members off a declared property name by its spelling, so ``{"\\u0061": "x"}`` passed
  where ``"a"`` must be an integer. Its escape rule is replaced by the canonical one (what
  ``json.dumps`` writes, as the fsm backend does): every string keeps its one spelling.
* **Number spellings.** xgrammar's number rule takes ``-0``, trailing fraction zeros and
  exponents, so a model could pad ``90.000…`` without end. Under ``NumberForm.CANONICAL`` (the
  default) that rule is replaced by the canonical one; integers are canonical already. Numbers
  with bounds keep xgrammar's own rules (at most 6 fraction digits, listed in ``narrowed``).
* **Mask vs accept.** On some recursive schemas xgrammar's mask forbids tokens that its
  ``accept_token`` accepts. :class:`XGrammarMatcher` accepts a token only when the current mask
  allows it, so the two never disagree.

Unanchored ``pattern`` (JSON Schema semantics: found anywhere) is rewritten for xgrammar, which
anchors patterns at both ends. Keywords xgrammar does not enforce are listed in ``unenforced``.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from grammask.errors import InvalidGrammarError, InvalidParameterError, InvalidRegexError, UnsupportedFeatureError
from grammask.checks import as_int
from grammask.grammars.base import Backend, CompiledGrammar, Matcher, Support, Unenforced
from grammask.grammars.registry import register_backend
from grammask.grammars.spec import Ebnf, JsonSchema, NumberForm, PropertyOrder, Regex, Spec, StructuralTag, Whitespace
from grammask.grammars.xgrammar_schema import XGrammarSchema, prepare_for_xgrammar, without_formats
from grammask.schemas.normalize import without_undefined_keywords
from grammask.masking.bitmask import BITMASK_DTYPE, bitmask_width, host_row, host_words
from grammask.tokenizer import TokenizerInfo

try:
    import xgrammar as xgr
except ImportError as exc:  # pragma: no cover - xgrammar is a dependency
    raise ImportError("the xgrammar backend needs the 'xgrammar' package: pip install xgrammar") from exc

NAME = "xgrammar"
# xgrammar's rule for the characters of a length-bounded string, and the one we use instead.
_LENGTH_CHAR_RULE = r'(([^\"\\\r\n]))'
_UNESCAPED_STRING_CHAR = r'([^"\\\0-\x1f])'
_FREE_VALUE_RULES = ("basic_array_items", "basic_object_properties")
# xgrammar's escapes in strings, and the canonical ones (json.dumps'): no "\/", and "\u" only for
# control characters, so that a name has one spelling (xgrammar keeps other members off a declared
# name by its spelling: "\u0061" passed as a member other than "a").
_ESCAPE_RULE = r'(([\"\\/bfnrt]) | ("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]))'
_CANONICAL_ESCAPE_RULE = r'(([\"\\bfnrt]) | ("u00" [0-1] [0-9a-f]))'
# xgrammar's rule for a number without bounds (sign, integer part, fraction, exponent), and the
# canonical one of NumberForm.CANONICAL: no "-0", no trailing fraction zeros, no exponent.
_NUMBER_RULE = "((basic_number_1 basic_number_2 basic_number_3 basic_number_5))"
_CANONICAL_NUMBER_RULE = '(("0") | ("-"? [1-9] [0-9]*) | ("-"? ("0" | [1-9] [0-9]*) "." [0-9]* [1-9]))'
_LINE_COLUMN = re.compile(r"\bat line (\d+),? column (\d+)")
_LOG_PREFIX = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: ")


_UNMATCHABLE_BY_TEXT = b"\xff"


def _xgrammar_tokenizer(info: TokenizerInfo, *, token_elements: bool = False) -> "xgr.TokenizerInfo":
    """xgrammar's view of ``info``: special ids and ids past the real vocabulary become empty tokens,
    which xgrammar never allows. With ``token_elements``, special ids keep their text behind a 0xFF
    byte and :data:`_SPECIAL_MARK` instead (invalid UTF-8, so text never matches them, and
    wildcards exclude the mark; a ``token`` element matches them by id)."""

    def entry(i: int) -> bytes:
        if not info.is_special(i):
            return info.token_bytes[i]
        if token_elements and i < info.real_vocab_size:
            return _UNMATCHABLE_BY_TEXT + _SPECIAL_MARK.encode() + info.token_bytes[i]
        return b""

    vocab = [entry(i) for i in range(info.vocab_size)]
    return xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=info.vocab_size, stop_token_ids=list(info.eos_ids))


@register_backend
class XGrammarBackend(Backend):
    """Compiles every spec kind with xgrammar.

    Args:
        tokenizer_info: the tokenizer.
        max_threads: threads xgrammar may use to compile.
    """

    name = NAME

    def __init__(self, tokenizer_info: TokenizerInfo, *, max_threads: int = 8) -> None:
        super().__init__(tokenizer_info)
        self._compiler = xgr.GrammarCompiler(
            _xgrammar_tokenizer(tokenizer_info), max_threads=max_threads, cache_enabled=False
        )
        self._max_threads = max_threads
        self._token_aware: "xgr.GrammarCompiler | None" = None
        self._lock = threading.Lock()

    def supports(self, spec: Spec) -> Support:
        return Support(isinstance(spec, (JsonSchema, Regex, Ebnf, StructuralTag)))

    def predict_unenforced(self, spec: Spec) -> tuple[Unenforced, ...]:
        if isinstance(spec, JsonSchema):
            return prepared_schema(spec).unenforced
        if isinstance(spec, StructuralTag):
            return _structural_tag_unenforced(spec)
        return ()

    def predict_narrowed(self, spec: Spec) -> tuple[Unenforced, ...]:
        if isinstance(spec, JsonSchema):
            return prepared_schema(spec).narrowed
        return ()

    def compile(self, spec: Spec) -> CompiledGrammar:
        start = time.perf_counter()
        unenforced: tuple[Unenforced, ...] = ()
        narrowed: tuple[Unenforced, ...] = ()
        unenforced = self.predict_unenforced(spec)
        narrowed = self.predict_narrowed(spec)
        if isinstance(spec, JsonSchema):
            compiled = self._compile_ebnf(json_schema_ebnf(spec), "root")
        elif isinstance(spec, Regex):
            compiled = self._compile_regex(spec.pattern)
        elif isinstance(spec, Ebnf):
            compiled = self._compile_ebnf(spec.grammar, spec.root)
        elif isinstance(spec, StructuralTag):
            compiled = self._compile_structural_tag(spec)
        else:
            raise UnsupportedFeatureError(type(spec).__name__, "", NAME, "not a spec")
        return XGrammarCompiled(
            spec=spec,
            tokenizer_info=self.tokenizer_info,
            backend=NAME,
            unenforced=unenforced,
            narrowed=narrowed,
            compile_seconds=time.perf_counter() - start,
            xgr_compiled=compiled,
        )

    def _compile_regex(self, pattern: str) -> "xgr.CompiledGrammar":
        try:
            return self._compiler.compile_regex(pattern)
        except (RuntimeError, ValueError) as exc:
            message = _xgrammar_message(exc)
            found = re.search(r"position (\d+)", message)
            position = int(found.group(1)) if found else None
            unsupported = re.search(r"(\w[\w ]*?) is not supported", message)
            if unsupported:
                where = f"@{position}" if position is not None else ""
                raise UnsupportedFeatureError(unsupported.group(1).lower(), where, NAME, f"pattern {pattern!r}") from None
            raise InvalidRegexError(message, pattern, position) from None

    def _compile_ebnf(self, grammar: str, root: str) -> "xgr.CompiledGrammar":
        try:
            return self._compiler.compile_grammar(grammar, root_rule_name=root)
        except (RuntimeError, ValueError) as exc:
            raise _grammar_error(exc) from None

    def _compile_structural_tag(self, spec: StructuralTag) -> "xgr.CompiledGrammar":
        tree = _xgrammar_format(spec.format, spec.contents, self.tokenizer_info)
        document = json.dumps({"type": "structural_tag", "format": tree})
        compiler = self._token_compiler() if spec.uses_tokens else self._compiler
        try:
            return compiler.compile_structural_tag(document)
        except (RuntimeError, ValueError) as exc:
            raise _grammar_error(exc, positions=False) from None

    def _token_compiler(self) -> "xgr.GrammarCompiler":
        """A compiler whose vocabulary gives each special token its text behind a 0xFF byte: no text
        (always valid UTF-8) can match it, while a ``token`` element matches it by id."""
        with self._lock:
            if self._token_aware is None:
                self._token_aware = xgr.GrammarCompiler(
                    _xgrammar_tokenizer(self.tokenizer_info, token_elements=True),
                    max_threads=self._max_threads,
                    cache_enabled=False,
                )
            return self._token_aware


@functools.lru_cache(maxsize=256)
def prepared_schema(spec: JsonSchema) -> XGrammarSchema:
    """``spec``'s schema rewritten for xgrammar, with what xgrammar still does not enforce (see
    :mod:`grammask.grammars.xgrammar_schema`); ``format`` is left out unless formats are asserted."""
    schema = without_undefined_keywords(spec.schema, "xgrammar")
    schema = schema if spec.assert_formats else without_formats(schema)
    return prepare_for_xgrammar(schema, any_order=spec.property_order is PropertyOrder.ANY)


def json_schema_ebnf(spec: JsonSchema) -> str:
    """The EBNF xgrammar compiles for ``spec``, with the string-length rule repaired (see the module doc)."""
    schema = prepared_schema(spec).schema
    flexible = spec.whitespace is Whitespace.FLEXIBLE
    try:
        grammar = xgr.Grammar.from_json_schema(
            json.dumps(schema),
            any_whitespace=flexible,
            separators=None if flexible else (",", ":"),
            strict_mode=spec.strict,
            max_whitespace_cnt=spec.max_whitespace if flexible else None,
            any_order=spec.property_order is PropertyOrder.ANY,
        )
    except (RuntimeError, ValueError) as exc:
        raise UnsupportedFeatureError("schema", "", NAME, _xgrammar_message(exc)) from None
    return _repair_rules(str(grammar), compact=not flexible, canonical_numbers=spec.number_form is NumberForm.CANONICAL)


def _repair_rules(ebnf: str, compact: bool, canonical_numbers: bool) -> str:
    lines = []
    for line in ebnf.splitlines():
        name, sep, body = line.partition(" ::= ")
        if sep and name.endswith("_characters") and body == _LENGTH_CHAR_RULE:
            line = f"{name} ::= {_UNESCAPED_STRING_CHAR}"
        elif sep and compact and name in _FREE_VALUE_RULES:
            line = name + " ::= " + body.replace('", "', '","')
        elif sep and name == "basic_escape" and body == _ESCAPE_RULE:
            line = f"{name} ::= {_CANONICAL_ESCAPE_RULE}"
        elif sep and canonical_numbers and name == "basic_number" and body == _NUMBER_RULE:
            line = f"{name} ::= {_CANONICAL_NUMBER_RULE}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _structural_tag_unenforced(spec: StructuralTag) -> tuple[Unenforced, ...]:
    """What xgrammar does not enforce in a structural tag's JSON Schema content, with paths under
    ``/contents/<i>`` (grammask specs) or the element's place in the tree (other styles)."""
    found = [
        Unenforced(u.keyword, f"/contents/{i}{u.path}", u.reason)
        for i, content in enumerate(spec.contents)
        if isinstance(content, JsonSchema)
        for u in prepared_schema(content).unenforced
    ]
    for path, node in _nodes(spec.format, ""):
        if node.get("type") == "json_schema":
            schema, any_order = node.get("json_schema", True), bool(node.get("any_order"))
            prepared = prepare_for_xgrammar(schema, any_order=any_order)
            found.extend(Unenforced(u.keyword, f"{path}{u.path}", u.reason) for u in prepared.unenforced)
    return tuple(found)


def _nodes(node: Any, path: str):
    """``(path, node)`` of every object in a format tree."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _nodes(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _nodes(value, f"{path}/{i}")


# Text-level wildcards exclude this marker, which every special token's text carries in the token-aware
# vocabulary: without it, xgrammar's free text with exclusions matches any bytes, 0xFF included.
_SPECIAL_MARK = "\x7fgrammask-special\x7f"
_TEXT_WILDCARDS = frozenset({"any_text", "triggered_tags", "dispatch"})
_TOKEN_WILDCARDS = frozenset({"any_tokens", "exclude_token", "token_triggered_tags", "token_dispatch"})


def _xgrammar_format(node: Any, contents: tuple[Any, ...], info: TokenizerInfo) -> Any:
    """The tree xgrammar compiles: spec leaves become grammar / regex elements, token texts become
    ids, and wildcards exclude special tokens: text ones through :data:`_SPECIAL_MARK`, token ones
    by id (all special and EOS ids but the node's own triggers)."""
    if isinstance(node, list):
        return [_xgrammar_format(v, contents, info) for v in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "spec":
        return _tag_content(contents[node["index"]])
    out = {}
    for key, value in node.items():
        if key == "token" and kind == "token":
            out[key] = _token_id(value, info)
        elif key in ("exclude_tokens", "trigger_tokens"):
            out[key] = [_token_id(v, info) for v in value]
        elif key == "rules" and kind == "token_dispatch":
            out[key] = [[_token_id(rule[0], info), _xgrammar_format(rule[1], contents, info)] for rule in value]
        else:
            out[key] = _xgrammar_format(value, contents, info)
    if kind in _TEXT_WILDCARDS:
        out["excludes"] = [*out.get("excludes", []), _SPECIAL_MARK]
    elif kind in _TOKEN_WILDCARDS:
        own = set(out.get("trigger_tokens", [])) | {rule[0] for rule in out.get("rules", [])}
        never = (set(info.special_ids) | set(info.eos_ids)) - own
        out["exclude_tokens"] = sorted(set(out.get("exclude_tokens", [])) | {i for i in never if i < info.real_vocab_size})
    return out


def _token_id(token: Any, info: TokenizerInfo) -> int:
    if isinstance(token, int) and not isinstance(token, bool) and 0 <= token < info.real_vocab_size:
        return token
    found = info.token_id(token) if isinstance(token, str) else None
    if found is None:
        raise InvalidGrammarError(f"token {token!r} is not a single token of this tokenizer")
    return found


def _tag_content(content: JsonSchema | Regex | Ebnf) -> dict[str, Any]:
    if isinstance(content, JsonSchema):
        return {"type": "grammar", "grammar": json_schema_ebnf(content)}
    if isinstance(content, Regex):
        return {"type": "regex", "pattern": content.pattern}
    if content.root != "root":
        return {"type": "grammar", "grammar": f"root ::= {content.root}\n{content.grammar}"}
    return {"type": "grammar", "grammar": content.grammar}


def _xgrammar_message(exc: Exception) -> str:
    """The last line of xgrammar's error, without its log prefix (``[12:34:56] /project/cpp/x.cc:820: ``)."""
    text = str(exc).strip()
    line = text.splitlines()[-1] if text else repr(exc)
    return _LOG_PREFIX.sub("", line).strip() or repr(exc)


def _grammar_error(exc: Exception, *, positions: bool = True) -> InvalidGrammarError:
    """An :class:`InvalidGrammarError` from xgrammar's; ``positions``: whether its line and column are
    positions in the caller's own text (not in a grammar this module assembled)."""
    message = _xgrammar_message(exc)
    found = _LINE_COLUMN.search(message)
    if found is None or not positions:
        return InvalidGrammarError(message)
    reason = message[found.end():].lstrip(": ") or message
    kind = message[: found.start()].removesuffix(" at").strip()
    return InvalidGrammarError(f"{kind}: {reason}" if kind else reason, int(found.group(1)), int(found.group(2)))


@dataclass(frozen=True, eq=False)
class XGrammarCompiled(CompiledGrammar):
    """A spec compiled by xgrammar."""

    xgr_compiled: Any = None

    def matcher(self, *, max_tokens: int | None = None) -> "XGrammarMatcher":
        if max_tokens is not None:
            as_int("max_tokens", max_tokens, low=1)  # checked, though this backend does not honour budgets
        return XGrammarMatcher(self)

    @property
    def memory_bytes(self) -> int:
        return int(self.xgr_compiled.memory_size_bytes)


class XGrammarMatcher(Matcher):
    """A cursor in an xgrammar grammar; :meth:`accept_token` only accepts tokens the mask allows.

    The check reads the row of the last :meth:`fill_next_token_bitmask` for the current state (no
    copy, so a fill costs what xgrammar's costs); when there was none, the matcher fills a private
    row first. Do not overwrite a filled row before calling :meth:`accept_token` for it.

    Safe to share between threads: xgrammar's matcher is not (concurrent calls corrupt its heap), so
    every call holds the matcher's lock. Once terminated, a fill writes an all-zero row (nothing can
    be accepted), as the ``fsm`` matcher does, instead of xgrammar's error.
    """

    def __init__(self, compiled: XGrammarCompiled, _inner: "xgr.GrammarMatcher | None" = None) -> None:
        self._compiled = compiled
        self._vocab_size = compiled.tokenizer_info.vocab_size
        self._width = bitmask_width(self._vocab_size)
        self._inner = _inner or xgr.GrammarMatcher(compiled.xgr_compiled, max_rollback_tokens=-1)
        self._own_mask = torch.empty((1, self._width), dtype=BITMASK_DTYPE)
        self._own_words = self._own_mask.numpy()
        # The rows holding the current state's mask: (numpy view of a bitmask, row), or None.
        self._mask_rows: tuple[object, int] | None = None
        self._accepted = 0
        self._lock = threading.Lock()

    @property
    def num_accepted(self) -> int:
        return self._accepted

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        target = host_row(bitmask, row, self._width)  # checked here: xgrammar itself ignores strides
        row = as_int("row", row)
        with self._lock:
            if self._inner.is_terminated():
                target[:] = 0
            else:
                self._inner.fill_next_token_bitmask(bitmask, row)
            self._mask_rows = (host_words(bitmask), row)

    def accept_token(self, token_id: int) -> bool:
        token_id = as_int("token_id", token_id)
        with self._lock:
            return self._accept(token_id)

    def _accept(self, token_id: int) -> bool:
        if not 0 <= token_id < self._vocab_size or self._inner.is_terminated():
            return False
        if self._mask_rows is None:
            self._inner.fill_next_token_bitmask(self._own_mask, 0)
            self._mask_rows = (self._own_words, 0)
        words, row = self._mask_rows
        if not (int(words[row, token_id >> 5]) >> (token_id & 31)) & 1:
            return False
        if not self._inner.accept_token(token_id):
            return False
        self._mask_rows = None
        self._accepted += 1
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        num_tokens = as_int("num_tokens", num_tokens)
        with self._lock:
            if not 0 <= num_tokens <= self._accepted:
                raise InvalidParameterError(
                    "num_tokens", num_tokens, f"an int with 0 <= num_tokens <= {self._accepted} (tokens accepted)"
                )
            if num_tokens:
                self._inner.rollback(num_tokens)
                self._accepted -= num_tokens
                self._mask_rows = None

    def is_terminated(self) -> bool:
        with self._lock:
            return self._inner.is_terminated()

    def reset(self) -> None:
        with self._lock:
            self._inner.reset()
            self._accepted = 0
            self._mask_rows = None

    def jump_forward_string(self) -> str:
        with self._lock:
            return self._inner.find_jump_forward_string()

    def fork(self) -> "XGrammarMatcher":
        with self._lock:
            copy = XGrammarMatcher(self._compiled, self._inner.fork())
            copy._accepted = self._accepted
        return copy


__all__ = ["XGrammarBackend", "XGrammarCompiled", "XGrammarMatcher", "json_schema_ebnf"]
