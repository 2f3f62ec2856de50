"""grammask as an SGLang grammar backend (SGLang 0.5.23): ``--grammar-backend grammask``.

SGLang keeps one grammar object per request (``BaseGrammarObject``): the scheduler accepts each
sampled token (a rejected token raises ``ValueError``), fills the batch's vocab mask row by row,
rolls back speculative tokens, and makes each new request's object with ``copy()`` of the one it
cached for the same key (a fresh object at the start state). :class:`GrammaskGrammarObject` is that
object over a grammask matcher; :class:`GrammaskGrammarBackend` compiles SGLang's keys (``json``,
``regex``, ``ebnf``, ``structural_tag``) through :func:`grammask.openai.spec_from_request`.

Turning it on: ``pip install grammask`` declares an ``sglang.srt.plugins`` entry point that SGLang
runs in every process; :func:`register` adds ``grammask`` to SGLang's grammar backends. Then start
the server with ``--grammar-backend grammask``. With ``--reasoning-parser``, grammask is wrapped in
SGLang's own ``ReasonerGrammarBackend`` (the grammar applies after the think section), as SGLang's
built-in backends are; its strict-thinking token filter works too.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from grammask.errors import GrammaskError
from grammask.grammars.base import CompiledGrammar, Matcher
from grammask.grammars.compiler import GrammarCompiler
from grammask.grammars.spec import JsonSchema, Spec, Whitespace
from grammask.kernels.apply_mask import apply_mask
from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.bitmask import allocate_token_bitmask, reset_token_bitmask
from grammask.openai import spec_from_request
from grammask.tokenizer import TokenizerInfo

try:
    from sglang.srt.constrained.base_grammar_backend import (
        BaseGrammarBackend,
        BaseGrammarObject,
        GrammarRow,
        GrammarStats,
        InvalidGrammarObject,
        register_grammar_backend,
    )
except ImportError as exc:  # pragma: no cover - SGLang is optional
    raise ImportError(
        "grammask.integrations.sglang needs SGLang 0.5.23: pip install --no-deps sglang==0.5.23 (then grammask's 'engines' extra)"
    ) from exc

__all__ = ["BACKEND_NAME", "GrammaskGrammarBackend", "GrammaskGrammarObject", "create_backend", "register"]

BACKEND_NAME = "grammask"
ANY_JSON = "$$ANY$$"
"""SGLang's JSON key for "any JSON value" (``response_format={"type": "json_object"}``)."""
_FIELD_OF_KEY = {"json": "json", "regex": "regex", "ebnf": "grammar", "structural_tag": "structural_tag"}


class GrammaskGrammarObject(BaseGrammarObject):
    """One request's grammar for SGLang.

    Attributes:
        compiled: the compiled grammar (its ``backend``, ``choice``, ``unenforced``).
        matcher: the request's matcher.
    """

    def __init__(self, compiled: CompiledGrammar, matcher: Matcher | None = None, key_string: str = "") -> None:
        super().__init__()
        self.compiled = compiled
        self.matcher = matcher if matcher is not None else compiled.matcher()
        self.key_string = key_string
        self.grammar_stats = GrammarStats(dispatch_type=compiled.spec.kind)

    def accept_token(self, token: int) -> None:
        """Advance by ``token``. Raises ``ValueError`` (SGLang aborts the request) when the grammar
        rejects it; nothing happens once the grammar has ended."""
        if self.matcher.is_terminated():
            return
        self.current_token = token
        if not self.matcher.accept_token(int(token)):
            raise ValueError(f"grammask: token {token} is not allowed here (grammar {self.key_string[:80]!r})")

    def rollback(self, k: int) -> None:
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        """``(batch_size, ceil(vocab_size / 32))`` int32 on the CPU (pinned when CUDA is there), all allowed."""
        return allocate_token_bitmask(batch_size, vocab_size)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: List[GrammarRow], vocab_mask: torch.Tensor) -> None:
        """Fill the listed rows on grammask's thread pool (matchers fill with the GIL released where they can)."""
        ours = [e for e in entries if isinstance(e.grammar, GrammaskGrammarObject)]
        fill_next_token_bitmask([e.grammar.matcher for e in ours], vocab_mask, [e.row for e in ours])
        for entry in entries:
            if not isinstance(entry.grammar, GrammaskGrammarObject):
                entry.grammar.fill_vocab_mask(vocab_mask, entry.row)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        reset_token_bitmask(vocab_mask)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        """Mask ``logits`` ``(batch, vocab)`` in place (Triton on GPU, torch on CPU)."""
        apply_mask(logits, vocab_mask.to(logits.device, non_blocking=True))

    def copy(self) -> "GrammaskGrammarObject":
        """A fresh object at the start state (SGLang copies the cached object for each new request)."""
        return GrammaskGrammarObject(self.compiled, key_string=self.key_string)

    def try_jump_forward(self, tokenizer: Any) -> Optional[Tuple[List[int], str]]:
        """``([], text)`` when every continuation starts with ``text``, else ``None``."""
        forced = self.matcher.jump_forward_string()
        return ([], forced) if forced else None

    def jump_forward_str_state(self, helper: Tuple[List[int], str]) -> Tuple[str, int]:
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids: List[int], new_output_ids: List[int], next_state: int) -> None:
        """Bring the grammar from ``old_output_ids`` (what it accepted) to ``new_output_ids`` (the
        output retokenized after a jump): roll back past the common prefix, accept the rest."""
        common = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            common += 1
        self.matcher.rollback(len(old_output_ids) - common)
        for token in new_output_ids[common:]:
            if not self.matcher.accept_token(int(token)):
                raise ValueError(f"grammask: retokenized token {token} is not allowed (grammar {self.key_string[:80]!r})")

    def __repr__(self) -> str:
        return f"GrammaskGrammarObject({self.compiled.spec.kind}, backend={self.compiled.backend!r}, accepted={self.matcher.num_accepted})"


class GrammaskGrammarBackend(BaseGrammarBackend):
    """SGLang's grammar backend over one grammask compiler (cached, thread-safe).

    Args:
        tokenizer: the server's Hugging Face tokenizer.
        vocab_size: the model's logits width.
        eos_token_ids: the model's EOS ids (they end a structure); default: the tokenizer's.
        whitespace: where JSON may hold whitespace (SGLang's ``--constrained-json-disable-any-whitespace``
            gives compact; otherwise bounded runs).
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: Optional[Sequence[int]] = None,
        whitespace: Whitespace = Whitespace.FLEXIBLE,
    ) -> None:
        super().__init__()
        eos = sorted(eos_token_ids) if eos_token_ids else None
        self.tokenizer_info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, eos_ids=eos)
        self.compiler = GrammarCompiler(self.tokenizer_info)
        self.vocab_size = vocab_size
        self.whitespace = whitespace

    @property
    def is_support_token_filter(self) -> bool:
        return True

    # The mask calls SGLang's ReasonerGrammarBackend takes from the backend (for requests still thinking).
    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        return allocate_token_bitmask(batch_size, vocab_size)

    move_vocab_mask = staticmethod(GrammaskGrammarObject.move_vocab_mask)
    apply_vocab_mask = staticmethod(GrammaskGrammarObject.apply_vocab_mask)

    @staticmethod
    def set_token_filter(vocab_mask: torch.Tensor, token_ids: List[int], batch_idx: int, is_allowed: bool = True,
                         reset_vocab_mask: bool = True) -> None:
        """Allow only (or forbid) ``token_ids`` in row ``batch_idx`` (SGLang's strict thinking)."""
        from sglang.srt.constrained.torch_ops.token_filter_torch_ops import set_token_filter_torch

        set_token_filter_torch(vocab_mask, token_ids, batch_idx, is_allowed=is_allowed, reset_vocab_mask=reset_vocab_mask)

    def spec_of(self, key_type: str, key_string: str) -> Spec:
        """The grammask spec of SGLang's grammar key ``(key_type, key_string)``."""
        if key_type == "json" and key_string == ANY_JSON:
            return JsonSchema(True, whitespace=self.whitespace)
        spec = spec_from_request({"structured_outputs": {_FIELD_OF_KEY[key_type]: key_string}}, whitespace=self.whitespace)
        assert spec is not None  # one field given: a spec or an error
        return spec

    def _dispatch(self, key_type: str, key_string: str) -> BaseGrammarObject:
        try:
            compiled = self.compiler.compile(self.spec_of(key_type, key_string))
        except GrammaskError as exc:
            return InvalidGrammarObject(str(exc))
        return GrammaskGrammarObject(compiled, key_string=key_string)

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        return self._dispatch("json", key_string)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._dispatch("regex", key_string)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        return self._dispatch("ebnf", key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        return self._dispatch("structural_tag", key_string)

    def reset(self) -> None:
        super().reset()
        self.compiler.clear_cache()


def create_backend(server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Optional[set] = None) -> BaseGrammarBackend:
    """SGLang's init function for ``--grammar-backend grammask``: the backend, wrapped in SGLang's
    ``ReasonerGrammarBackend`` when the server has a ``--reasoning-parser``."""
    compact = bool(getattr(server_args, "constrained_json_disable_any_whitespace", False))
    backend: BaseGrammarBackend = GrammaskGrammarBackend(
        tokenizer, vocab_size, eos_token_ids, Whitespace.COMPACT if compact else Whitespace.FLEXIBLE
    )
    reasoning_parser = getattr(server_args, "reasoning_parser", None)
    if reasoning_parser:
        from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        parser = ReasoningParser(model_type=reasoning_parser, stream_reasoning=False, tokenizer=tokenizer)
        strict = bool(getattr(server_args, "enable_strict_thinking", False))
        backend = ReasonerGrammarBackend(backend, parser, tokenizer, enable_strict_thinking=strict)
    return backend


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: add ``grammask`` to SGLang's grammar backends (idempotent)."""
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices

    register_grammar_backend(BACKEND_NAME, create_backend)
    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([BACKEND_NAME])

