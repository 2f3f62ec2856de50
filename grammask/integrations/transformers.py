"""Constrain ``transformers``' ``model.generate(...)`` with grammask grammars.

::

    compiler = GrammarCompiler(TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size))
    processor = GrammaskLogitsProcessor(compiler.compile(JsonSchema(schema)))
    out = model.generate(input_ids, logits_processor=LogitsProcessorList([processor]),
                         eos_token_id=list(compiler.tokenizer_info.eos_ids), max_new_tokens=256)

One matcher per batch row (one compiled grammar for every row, or one per row). Works with greedy
decoding, sampling and batched generation; not with beam search (rows would have to be reordered).
A processor instance serves one ``generate`` call: make a new one (or call :meth:`GrammaskLogitsProcessor.reset`) per call.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from grammask.errors import GrammaskError, InvalidParameterError
from grammask.grammars.base import CompiledGrammar, Matcher
from grammask.kernels.apply_mask import apply_mask
from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.bitmask import allocate_token_bitmask

try:
    from transformers import LogitsProcessor as _Base
except ImportError:  # transformers is optional: the class still works as a plain callable
    _Base = object  # type: ignore[assignment,misc]

__all__ = ["GrammaskLogitsProcessor", "load_pretrained_model", "load_pretrained_tokenizer"]


class GrammaskLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """A ``transformers`` ``LogitsProcessor`` that masks every row's scores with its grammar.

    Args:
        grammars: one compiled grammar for all rows, or a sequence with one per batch row.
        max_new_tokens: the budget given to matchers whose grammar supports budget-aware closing
            (pass the same value as to ``generate``); ``None`` for no budget.

    Each call reads the token the previous step chose (the last column of ``input_ids``), advances
    that row's matcher, and masks the row's next tokens. A row whose matcher has ended (EOS accepted)
    is not masked, so transformers' padding of finished rows passes through.
    """

    def __init__(self, grammars: CompiledGrammar | Sequence[CompiledGrammar], *, max_new_tokens: int | None = None) -> None:
        self.grammars = [grammars] if isinstance(grammars, CompiledGrammar) else list(grammars)
        if not self.grammars:
            raise InvalidParameterError("grammars", grammars, "a compiled grammar or a non-empty list of them")
        self.max_new_tokens = max_new_tokens
        self.vocab_size = self.grammars[0].tokenizer_info.vocab_size
        self.matchers: list[Matcher] = []
        self._prompt_length: int | None = None
        self._bitmask: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the matchers, for another ``generate`` call."""
        self.matchers, self._prompt_length, self._bitmask = [], None, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Mask ``scores`` ``(batch, vocab)`` float (in place and returned); ``input_ids`` ``(batch, length)``."""
        if self._prompt_length is None:
            self._start(input_ids.shape[0], input_ids.shape[1])
        else:
            self._accept(input_ids[:, -1].tolist())
        live = [row for row, m in enumerate(self.matchers) if not m.is_terminated()]
        if not live:
            return scores
        bitmask = self._bitmask[: len(live)]  # type: ignore[index]
        fill_next_token_bitmask([self.matchers[r] for r in live], bitmask)
        indices = torch.tensor(live, dtype=torch.int64, device=scores.device)
        apply_mask(scores, bitmask.to(scores.device), indices=indices)
        return scores

    def _start(self, batch: int, prompt_length: int) -> None:
        if len(self.grammars) not in (1, batch):
            raise InvalidParameterError("grammars", f"{len(self.grammars)} grammars", f"1 or one per batch row ({batch})")
        grammars = self.grammars * batch if len(self.grammars) == 1 else self.grammars
        budget = self.max_new_tokens
        self.matchers = [g.matcher(max_tokens=budget) if budget and g.supports_budget else g.matcher() for g in grammars]
        self._prompt_length = prompt_length
        self._bitmask = allocate_token_bitmask(batch, self.vocab_size)

    def _accept(self, tokens: list[int]) -> None:
        if len(tokens) != len(self.matchers):
            raise InvalidParameterError(
                "input_ids", f"{len(tokens)} rows", f"{len(self.matchers)} rows (beam search is not supported)"
            )
        for row, token in enumerate(tokens):
            matcher = self.matchers[row]
            if not matcher.is_terminated() and not matcher.accept_token(token):
                raise GrammaskError(
                    f"row {row}: token {token} is not allowed by the grammar (was the processor reused "
                    "across generate calls, or did another processor run after it?)"
                )


def load_pretrained_tokenizer(name: str) -> tuple[Any, int]:
    """A model's tokenizer and its logits width, read from the model's config (no weights are loaded).

    Args:
        name: a Hugging Face model id or a local model folder.

    Raises:
        GrammaskError: the tokenizer or config cannot be loaded (the first line of the reason).
        ImportError: transformers is not installed.
    """
    AutoConfig, AutoTokenizer, _ = _auto_classes()
    try:
        config = AutoConfig.from_pretrained(name)
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise GrammaskError(f"cannot load the tokenizer of {name!r}: {str(exc).splitlines()[0]}") from None
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return tokenizer, int(text_config.vocab_size)


def load_pretrained_model(name: str) -> Any:
    """A causal LM's weights (in evaluation mode), from a Hugging Face model id or a local folder.

    Raises:
        GrammaskError: the model cannot be loaded (the first line of the reason).
        ImportError: transformers is not installed.
    """
    _, _, AutoModelForCausalLM = _auto_classes()
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # its bars would interleave with the caller's output
    try:
        return AutoModelForCausalLM.from_pretrained(name).eval()
    except (OSError, ValueError) as exc:
        raise GrammaskError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _auto_classes() -> tuple[Any, Any, Any]:
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ImportError(f"loading a Hugging Face model needs transformers ({exc}): pip install 'grammask[hf]'") from None
    return AutoConfig, AutoTokenizer, AutoModelForCausalLM
