"""Other constrained-decoding libraries behind one small interface, to measure them beside grammask.

A peer compiles a :class:`~grammask.grammars.spec.JsonSchema` or :class:`~grammask.grammars.spec.Regex`
for a :class:`~grammask.tokenizer.TokenizerInfo` (built the same way grammask builds its own, so
every library sees the same vocabulary, special ids and EOS ids), and gives matchers that fill the
same packed int32 bitmask. Peers are optional: :func:`load_peer` raises ``ImportError`` with an
install hint when the library is missing.
"""

from __future__ import annotations

import abc
import importlib
import json
from typing import Any, Callable

import torch

from grammask.grammars.spec import JsonSchema, PropertyOrder, Regex, Spec, Whitespace
from grammask.tokenizer import TokenizerInfo


class PeerMatcher(abc.ABC):
    """The part of a matcher that conformance runs and benchmarks need."""

    @abc.abstractmethod
    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        """Write the allowed tokens into ``bitmask[row]`` (``(batch, words)``, int32)."""

    @abc.abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance; ``False`` when the token is not allowed."""

    @abc.abstractmethod
    def is_terminated(self) -> bool:
        """Whether an EOS token was accepted."""


class Peer(abc.ABC):
    """A library compiling specs for one tokenizer."""

    name: str
    supports_any_order = False  # whether PropertyOrder.ANY is honoured (else declared order is forced)

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        self.tokenizer_info = tokenizer_info

    @abc.abstractmethod
    def compile(self, spec: Spec) -> Callable[[], PeerMatcher]:
        """Compile ``spec``; returns a factory of fresh matchers. Raises on failure."""


class XGrammarPeer(Peer):
    """Raw xgrammar with its own JSON Schema converter (no grammask workaround)."""

    name = "xgrammar"
    supports_any_order = True  # compile_json_schema(any_order=True)

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        super().__init__(tokenizer_info)
        import xgrammar as xgr

        from grammask.grammars.xgrammar_backend import _xgrammar_tokenizer

        self._xgr = xgr
        self._compiler = xgr.GrammarCompiler(_xgrammar_tokenizer(tokenizer_info), cache_enabled=False)

    def compile(self, spec: Spec) -> Callable[[], PeerMatcher]:
        if isinstance(spec, JsonSchema):
            flexible = spec.whitespace is Whitespace.FLEXIBLE
            compiled = self._compiler.compile_json_schema(
                spec.schema_json,
                any_whitespace=flexible,
                separators=None if flexible else (",", ":"),
                strict_mode=spec.strict,
                max_whitespace_cnt=spec.max_whitespace if flexible else None,
                any_order=spec.property_order is PropertyOrder.ANY,
            )
        elif isinstance(spec, Regex):
            compiled = self._compiler.compile_regex(spec.pattern)
        else:
            raise NotImplementedError(f"{self.name} peer: {spec.kind} not wired")
        return lambda: _XGrammarPeerMatcher(self._xgr.GrammarMatcher(compiled))


class _XGrammarPeerMatcher(PeerMatcher):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        self._inner.fill_next_token_bitmask(bitmask, row)

    def accept_token(self, token_id: int) -> bool:
        return self._inner.accept_token(token_id)

    def is_terminated(self) -> bool:
        return self._inner.is_terminated()


class LLGuidancePeer(Peer):
    """llguidance (the engine behind guidance and OpenAI-style structured outputs in some servers)."""

    name = "llguidance"

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        super().__init__(tokenizer_info)
        try:
            import llguidance
            import llguidance.torch as lltorch
        except ImportError:
            raise ImportError("the llguidance peer needs 'llguidance': pip install llguidance") from None
        self._ll = llguidance
        self._fill = lltorch.fill_next_token_bitmask
        self._tokenizer = llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(_LLTokenizerShim(tokenizer_info)),
            n_vocab=tokenizer_info.vocab_size,
            eos_token=list(tokenizer_info.eos_ids),
        )

    def compile(self, spec: Spec) -> Callable[[], PeerMatcher]:
        ll = self._ll
        if isinstance(spec, JsonSchema):
            options: dict[str, Any] = {"whitespace_flexible": spec.whitespace is Whitespace.FLEXIBLE}
            if spec.whitespace is Whitespace.COMPACT:
                options.update(item_separator=",", key_separator=":")
            grammar = ll.LLMatcher.grammar_from_json_schema(spec.schema_json, defaults=options)
        elif isinstance(spec, Regex):
            grammar = ll.LLMatcher.grammar_from_regex(spec.pattern)
        else:
            raise NotImplementedError(f"{self.name} peer: {spec.kind} not wired")
        error = ll.LLMatcher.validate_grammar(grammar, self._tokenizer)
        if error:
            raise ValueError(f"llguidance refused the grammar: {error}")
        tokenizer = self._tokenizer
        eos = frozenset(self.tokenizer_info.eos_ids)
        return lambda: _LLGuidancePeerMatcher(ll.LLMatcher(tokenizer, grammar, log_level=0), self._fill, eos)


class _LLGuidancePeerMatcher(PeerMatcher):
    def __init__(self, inner: Any, fill: Callable, eos_ids: frozenset[int]) -> None:
        self._inner = inner
        self._fill = fill
        self._eos_ids = eos_ids
        self._terminated = False

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        self._fill(self._inner, bitmask, row)

    def accept_token(self, token_id: int) -> bool:
        if self._terminated or self._inner.is_error():
            return False
        if token_id in self._eos_ids:
            # llguidance stops by itself once nothing can follow; EOS is then still the end we count.
            accepted = self._inner.is_accepting() and (self._inner.is_stopped() or self._inner.consume_token(token_id))
            self._terminated = bool(accepted)
            return self._terminated
        if self._inner.is_stopped() or self._inner.validate_tokens([token_id]) != 1:
            return False
        return self._inner.consume_token(token_id)

    def is_terminated(self) -> bool:
        return self._terminated


class _LLTokenizerShim:
    """What ``llguidance.TokenizerWrapper`` reads off a tokenizer, from a TokenizerInfo."""

    def __init__(self, info: TokenizerInfo) -> None:
        self.eos_token_id = info.eos_ids[0]
        self.bos_token_id = None
        self.tokens = [
            b"" if info.is_special(i) and i >= info.real_vocab_size else info.token_bytes[i]
            for i in range(info.vocab_size)
        ]
        self.special_token_ids = sorted(i for i in range(info.real_vocab_size) if info.is_special(i))
        special = set(self.special_token_ids)
        self._ids = {data: i for i, data in enumerate(self.tokens) if data and i not in special}
        self._longest = max(len(data) for data in self._ids)

    def __call__(self, text: str | bytes) -> list[int]:
        """Greedy longest-match tokenization (llguidance uses it for forced text; any valid split works)."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        ids, pos = [], 0
        while pos < len(data):
            for end in range(min(len(data), pos + self._longest), pos, -1):
                token = self._ids.get(data[pos:end])
                if token is not None:
                    ids.append(token)
                    pos = end
                    break
            else:
                raise ValueError(f"byte {data[pos]:#x} at {pos} has no token")
        return ids


class OutlinesCorePeer(Peer):
    """outlines-core: a JSON Schema becomes one regex, the regex a token-level index (a DFA over tokens).

    It forces declared property order and has no "any order" option; whitespace is compact when the
    spec asks for it (an empty whitespace pattern), else outlines' own default.
    """

    name = "outlines-core"

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        super().__init__(tokenizer_info)
        try:
            import outlines_core
        except ImportError:
            raise ImportError("the outlines-core peer needs 'outlines_core': pip install outlines-core") from None
        self._oc = outlines_core
        eos = tokenizer_info.eos_ids[0]
        by_bytes: dict[bytes, list[int]] = {}
        for i in range(tokenizer_info.real_vocab_size):
            data = tokenizer_info.token_bytes[i]
            if data and not tokenizer_info.is_special(i):
                by_bytes.setdefault(data, []).append(i)
        self._vocabulary = outlines_core.Vocabulary(eos, by_bytes)
        self._eos_ids = frozenset(tokenizer_info.eos_ids)
        self._eos = eos

    def compile(self, spec: Spec) -> Callable[[], PeerMatcher]:
        oc = self._oc
        if isinstance(spec, JsonSchema):
            ws = "" if spec.whitespace is Whitespace.COMPACT else None
            pattern = oc.json_schema.build_regex_from_schema(spec.schema_json, ws)
        elif isinstance(spec, Regex):
            pattern = spec.pattern
        else:
            raise NotImplementedError(f"{self.name} peer: {spec.kind} not wired")
        index = oc.Index(pattern, self._vocabulary)
        return lambda: _OutlinesPeerMatcher(oc.Guide(index), self._eos_ids, self._eos)


class _OutlinesPeerMatcher(PeerMatcher):
    def __init__(self, guide: Any, eos_ids: frozenset[int], eos: int) -> None:
        self._guide = guide
        self._eos_ids = eos_ids
        self._eos = eos
        self._terminated = False

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        target = bitmask[row]
        self._guide.write_mask_into(target.data_ptr(), target.numel(), 4)

    def accept_token(self, token_id: int) -> bool:
        if self._terminated:
            return False
        if token_id in self._eos_ids:
            # accepts_tokens() never accepts EOS; the allowed list holds it exactly in final states.
            self._terminated = self._eos in self._guide.get_tokens()
            return self._terminated
        if not self._guide.accepts_tokens([token_id]):
            return False
        self._guide.advance(token_id, return_tokens=False)
        return True

    def is_terminated(self) -> bool:
        return self._terminated


PEERS: dict[str, type[Peer]] = {"xgrammar": XGrammarPeer, "llguidance": LLGuidancePeer, "outlines-core": OutlinesCorePeer}
"""The peer classes by name (the names of :data:`grammask.conformance.PEER_MODULES`)."""


def load_peer(name: str, tokenizer_info: TokenizerInfo) -> Peer:
    """An instance of peer ``name`` (a name in :data:`PEERS`, or ``"module:Class"``); ``ImportError`` (with an install hint) when its library is missing."""
    if ":" in name:  # "package.module:Class", e.g. a test's fake peer
        module_name, _, class_name = name.partition(":")
        return getattr(importlib.import_module(module_name), class_name)(tokenizer_info)
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}: expected one of {sorted(PEERS)}")
    return PEERS[name](tokenizer_info)


def describe(spec: Spec) -> str:
    """A short label of a spec for tables."""
    if isinstance(spec, JsonSchema):
        return json.dumps(spec.schema)[:40]
    return getattr(spec, "pattern", spec.kind)[:40]
