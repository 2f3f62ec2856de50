"""Constrain ``transformers``' ``model.generate(...)`` with grammask grammars.

::

    compiler = GrammarCompiler(TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size))
    processor = GrammaskLogitsProcessor(compiler.compile(JsonSchema(schema)))
    out = model.generate(input_ids, logits_processor=LogitsProcessorList([processor]),
                         eos_token_id=list(compiler.tokenizer_info.eos_ids), max_new_tokens=256)

One matcher per batch row (one compiled grammar for every row, or one per prompt). Works with greedy
decoding, sampling, batched generation, ``num_return_sequences`` and beam search: each call matches
every row to the matcher of the row it grew from (its token history minus the new token), forking a
matcher that several beams share and rolling one back where a history was cut, so beams may be
reordered, duplicated or dropped between steps. For beam search pass ``num_beams`` too: beam search
can keep a beam whose score is already ``-inf`` (fewer allowed continuations than beams), and its
token is then outside the grammar; such a beam is masked out entirely instead of being an error.
A processor instance serves one ``generate`` call: make a new one (or call
:meth:`GrammaskLogitsProcessor.reset`) per call.

Jump-forward: give the processor the tokenizer and pass :func:`jump_forward_decoding` as
``custom_generate``; where the grammar forces the next text (a key, ``":"``, a closing bracket), its
canonical tokens are appended and fed to the model with the sampled token in one forward pass::

    processor = GrammaskLogitsProcessor(compiled, tokenizer=tok)
    out = model.generate(input_ids, logits_processor=LogitsProcessorList([processor]),
                         custom_generate=jump_forward_decoding, max_new_tokens=256)
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from grammask.checks import as_int, check_instance, check_tensor
from grammask.errors import GrammaskError, InvalidParameterError
from grammask.grammars.base import CompiledGrammar, Matcher
from grammask.kernels.apply_mask import apply_mask
from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.bitmask import allocate_token_bitmask

try:
    from transformers import LogitsProcessor as _Base
except ImportError:  # transformers is optional: the class still works as a plain callable
    _Base = object  # type: ignore[assignment,misc]

__all__ = ["GrammaskLogitsProcessor", "jump_forward_decoding", "load_pretrained_model", "load_pretrained_tokenizer"]


class GrammaskLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """A ``transformers`` ``LogitsProcessor`` that masks every row's scores with its grammar.

    Args:
        grammars: one compiled grammar for all rows, or a sequence with one per prompt (rows
            ``i * k .. (i + 1) * k - 1`` of a call with ``k`` rows per prompt use grammar ``i``).
        max_new_tokens: the budget given to matchers whose grammar supports budget-aware closing
            (pass the same value as to ``generate``); ``None`` for no budget.
        num_beams: the ``num_beams`` given to ``generate``; above 1, a row whose token the grammar
            rejects is a dead beam (masked out) rather than an error.
        tokenizer: the model's tokenizer (``transformers`` or ``tokenizers``); needed only by
            :func:`jump_forward_decoding`, which tokenizes the forced text with it.

    Each call reads every row's tokens since the prompt, brings the matcher of the row it grew from
    up to date, and masks the row's next tokens. A row whose matcher has ended (EOS accepted) is not
    masked, so transformers' padding of finished rows passes through.
    """

    def __init__(
        self,
        grammars: CompiledGrammar | Sequence[CompiledGrammar],
        *,
        max_new_tokens: int | None = None,
        num_beams: int = 1,
        tokenizer: Any = None,
    ) -> None:
        self.grammars = _check_grammars(grammars)
        self.tokenizer = tokenizer
        self.max_new_tokens = None if max_new_tokens is None else as_int("max_new_tokens", max_new_tokens, low=1)
        self.num_beams = as_int("num_beams", num_beams, low=1)
        self.vocab_size = self.grammars[0].tokenizer_info.vocab_size
        self.matchers: list[Matcher] = []
        self._histories: list[tuple[int, ...]] = []
        self._dead: list[bool] = []
        self._group_size = 1
        self._prompt_length: int | None = None
        self._bitmask: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the matchers, for another ``generate`` call."""
        self.matchers, self._histories, self._dead, self._prompt_length, self._bitmask = [], [], [], None, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Mask ``scores`` ``(rows, vocab)`` float (in place and returned); ``input_ids`` ``(rows, length)``, int64."""
        _check_call(input_ids, scores)
        if self._prompt_length is None:
            self._start(input_ids.shape[0], input_ids.shape[1])
        else:
            self._sync([tuple(row) for row in input_ids[:, self._prompt_length :].tolist()])
        return self._mask(scores)

    def _mask(self, scores: torch.Tensor) -> torch.Tensor:
        """Mask row ``r`` of ``scores`` ``(rows, vocab)`` float with ``self.matchers[r]``, in place."""
        dead = [row for row, is_dead in enumerate(self._dead) if is_dead]
        if dead:
            scores[dead] = float("-inf")
        live = [row for row, m in enumerate(self.matchers) if not m.is_terminated() and not self._dead[row]]
        if not live:
            return scores
        bitmask = self._bitmask[: len(live)]  # type: ignore[index]
        fill_next_token_bitmask([self.matchers[r] for r in live], bitmask)
        indices = torch.tensor(live, dtype=torch.int64, device=scores.device)
        apply_mask(scores, bitmask.to(scores.device), indices=indices)
        return scores

    def _start(self, rows: int, prompt_length: int) -> None:
        if rows % len(self.grammars):
            raise InvalidParameterError(
                "grammars", f"{len(self.grammars)} grammars", f"1 or one per prompt (rows: {rows})"
            )
        self._group_size = rows // len(self.grammars)
        budget = self.max_new_tokens
        self.matchers = [
            g.matcher(max_tokens=budget) if budget and g.supports_budget else g.matcher()
            for g in self.grammars
            for _ in range(self._group_size)
        ]
        self._histories = [()] * rows
        self._dead = [False] * rows
        self._prompt_length = prompt_length
        self._bitmask = allocate_token_bitmask(rows, self.vocab_size)

    def _sync(self, histories: list[tuple[int, ...]]) -> None:
        """Give row ``r`` the matcher of the previous row it grew from, advanced to ``histories[r]``."""
        if len(histories) != len(self.matchers):
            raise InvalidParameterError(
                "input_ids", f"{len(histories)} rows", f"{len(self.matchers)} rows, as at the first call (reset() between calls)"
            )
        where = {(row // self._group_size, h): row for row, h in enumerate(self._histories)}
        claimed: set[int] = set()
        matchers, dead = [], []
        for row, history in enumerate(histories):
            group = row // self._group_size
            source = where.get((group, history[:-1]), where.get((group, history)))
            if source is None:
                source = self._closest(group, history)
            matcher = self.matchers[source] if source not in claimed else self.matchers[source].fork()
            claimed.add(source)
            matchers.append(matcher)
            dead.append(self._dead[source] or not self._advance(matcher, self._histories[source], history, row))
        self.matchers, self._dead, self._histories = matchers, dead, histories

    def _closest(self, group: int, history: tuple[int, ...]) -> int:
        """The previous row of ``group`` sharing the longest prefix with ``history`` (a history cut back)."""
        rows = range(group * self._group_size, (group + 1) * self._group_size)
        return max(rows, key=lambda r: _common_prefix(self._histories[r], history))

    def _advance(self, matcher: Matcher, old: tuple[int, ...], new: tuple[int, ...], row: int) -> bool:
        """Roll ``matcher`` back from ``old`` to the common prefix and accept the rest of ``new``;
        ``False`` when the grammar rejects a token (a dead beam)."""
        common = _common_prefix(old, new)
        excess = matcher.num_accepted - common
        if excess > 0:
            matcher.rollback(excess)
        for token in new[matcher.num_accepted :]:
            if matcher.is_terminated():
                break  # transformers pads a finished row
            if not matcher.accept_token(token):
                if self.num_beams > 1:
                    return False
                raise GrammaskError(
                    f"row {row}: token {token} is not allowed by the grammar (was the processor reused across "
                    "generate calls, did another processor run after it, or is this beam search without num_beams?)"
                )
        return True


_CACHE_KWARGS = ("cache", "past_key_values")
"""The KV cache's name in ``model_kwargs``: ``cache`` from transformers 5.24, ``past_key_values`` before."""
_GENERATE_MODEL_KWARGS = frozenset({"attention_mask", "position_ids", "logits_to_keep", "use_cache", "cache_position", *_CACHE_KWARGS})
"""What ``generate`` itself puts in ``model_kwargs`` for a decoder-only prompt (the loop makes its own positions and cache)."""


def jump_forward_decoding(
    model: Any,
    input_ids: torch.LongTensor,
    logits_processor: Sequence[Any],
    stopping_criteria: Sequence[Any],
    generation_config: Any,
    **model_kwargs: Any,
) -> Any:
    """A ``custom_generate`` loop for ``model.generate`` that appends forced text without a pass per token.

    Each step masks and samples one token per row (greedy, or sampling under ``do_sample`` with every
    warper ``generate`` prepared), then appends the canonical tokens of the text the row's grammar
    forces after it (:func:`~grammask.masking.jump_forward.accept_forced_tokens`) and feeds the row all
    of them in the next forward pass. Rows grow by different amounts: the model gets an attention mask
    with holes and its own position ids, and length and EOS stop each row on its own. Needs a
    transformers whose ``generate`` takes a callable ``custom_generate`` (4.56 or later).

    Args:
        model: the decoder-only causal LM ``generate`` was called on.
        input_ids: ``(rows, length)`` int64, the left-padded prompts, ``num_return_sequences`` rows each.
        logits_processor: ``generate``'s prepared list; exactly one :class:`GrammaskLogitsProcessor`
            in it, made with ``tokenizer=``. The others see ``(rows, width)`` int64 histories,
            left-padded with the pad token.
        stopping_criteria: ``generate``'s prepared list; its length and EOS criteria are applied per
            row (``max_new_tokens`` new tokens at most), any other as given.
        generation_config: greedy or sampling; ``num_beams`` must be 1.
        model_kwargs: ``attention_mask`` and ``generate``'s own cache arguments; any other model input
            is refused.

    Returns:
        ``(rows, length + new)`` int64: each row's prompt, then its new tokens padded after their end
        with the pad token; under ``return_dict_in_generate`` a ``GenerateDecoderOnlyOutput`` with
        ``sequences`` only (forced tokens have no scores, so score outputs are refused).

    Raises:
        InvalidParameterError: beam search, an encoder-decoder model, extra model inputs, a filled
            cache, score outputs, or no (or several) grammask processors / no tokenizer.
    """
    processor = _jump_processor(logits_processor)
    _check_jump_generation(model, generation_config, model_kwargs)
    from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

    from grammask.generate import _HuggingFaceModel
    from grammask.masking.jump_forward import accept_forced_tokens, plain_encoder

    mask = model_kwargs.get("attention_mask")
    mask = torch.ones_like(input_ids) if mask is None else mask
    prompts = [row[keep.bool()].tolist() for row, keep in zip(input_ids.cpu(), mask.cpu())]
    rows, budget, pad_id = len(prompts), int(generation_config.max_length) - input_ids.shape[1], _pad_id(generation_config)
    eos = _eos_ids(generation_config)
    other_criteria = [c for c in stopping_criteria if not isinstance(c, (MaxLengthCriteria, EosTokenCriteria))]
    encode, info = plain_encoder(processor.tokenizer), processor.grammars[0].tokenizer_info
    processor._start(rows, input_ids.shape[1])
    new: list[list[int]] = [[] for _ in range(rows)]
    live = set(range(rows)) if budget > 0 else set()

    def forced(row: int, previous: int | None) -> list[int]:
        tokens = accept_forced_tokens(processor.matchers[row], encode, info, previous, limit=budget - len(new[row]))
        new[row].extend(tokens)
        return tokens

    runner = _HuggingFaceModel(model)
    logits = runner.prefill(prompts, pad_id)[:, -1]
    first = [forced(row, None) for row in range(rows)] if live else []
    if any(first):  # text forced before the first token, fed as one chunk
        after = runner.step(first, pad_id)
        jumped = torch.tensor([row for row, chunk in enumerate(first) if chunk], device=logits.device)
        logits = logits.clone()
        logits[jumped] = after[jumped]
    while live:
        history = _left_padded([p + n for p, n in zip(prompts, new)], pad_id, input_ids.device)
        scores = logits.float()
        for stage in logits_processor:
            scores = processor._mask(scores) if stage is processor else stage(history, scores)
        if generation_config.do_sample:
            tokens = torch.multinomial(torch.softmax(scores, dim=-1), 1).squeeze(1).tolist()
        else:
            tokens = scores.argmax(dim=-1).tolist()
        chunks = [[pad_id] for _ in range(rows)]
        for row in sorted(live):
            token, matcher = tokens[row], processor.matchers[row]
            if not matcher.is_terminated() and not matcher.accept_token(token):
                raise GrammaskError(f"row {row}: token {token} is not allowed by the grammar (did a processor after grammask's lift its mask?)")
            new[row].append(token)
            if token in eos or matcher.is_terminated() or len(new[row]) >= budget:
                live.discard(row)
                continue
            chunks[row] = [token] + forced(row, token)
            if len(new[row]) >= budget:
                live.discard(row)
        if other_criteria and live:
            history = _left_padded([p + n for p, n in zip(prompts, new)], pad_id, input_ids.device)
            stop = torch.zeros(rows, dtype=torch.bool, device=history.device)
            for criterion in other_criteria:
                stop |= criterion(history, scores).to(stop.device)
            live -= {row for row in live if stop[row]}
        if live:
            logits = runner.step(chunks, pad_id)
    width = max((len(n) for n in new), default=0)
    tail = torch.tensor([n + [pad_id] * (width - len(n)) for n in new], dtype=input_ids.dtype).reshape(rows, width)
    sequences = torch.cat([input_ids, tail.to(input_ids.device)], dim=1)
    if generation_config.return_dict_in_generate:
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences


def _jump_processor(logits_processor: Sequence[Any]) -> GrammaskLogitsProcessor:
    ours = [p for p in logits_processor if isinstance(p, GrammaskLogitsProcessor)]
    if len(ours) != 1:
        raise InvalidParameterError(
            "logits_processor", f"{len(ours)} GrammaskLogitsProcessor", "exactly one, for jump_forward_decoding"
        )
    if ours[0].tokenizer is None:
        raise InvalidParameterError(
            "GrammaskLogitsProcessor.tokenizer", "None", "the model's tokenizer (jump-forward tokenizes the forced text)"
        )
    return ours[0]


def _check_jump_generation(model: Any, config: Any, model_kwargs: dict[str, Any]) -> None:
    if getattr(model.config, "is_encoder_decoder", False):
        raise InvalidParameterError("model", type(model).__name__, "a decoder-only causal LM for jump_forward_decoding")
    if int(config.num_beams) != 1:
        raise InvalidParameterError("num_beams", config.num_beams, "1 for jump_forward_decoding (use the plain loop for beam search)")
    scored = [name for name in ("output_scores", "output_logits", "output_attentions", "output_hidden_states") if getattr(config, name, False)]
    if scored:
        raise InvalidParameterError(scored[0], True, "False for jump_forward_decoding (forced tokens are not scored)")
    extra = sorted(set(model_kwargs) - _GENERATE_MODEL_KWARGS)
    if extra:
        raise InvalidParameterError("model_kwargs", extra, f"only {sorted(_GENERATE_MODEL_KWARGS)} for jump_forward_decoding")
    for name in _CACHE_KWARGS:
        cache = model_kwargs.get(name)
        if cache is not None and hasattr(cache, "get_seq_length") and cache.get_seq_length() > 0:
            raise InvalidParameterError(name, "a filled cache", "no cache (the loop prefills the prompt itself)")


def _pad_id(config: Any) -> int:
    for value in (config.pad_token_id, *_eos_ids(config), 0):
        if value is not None:
            return int(value)
    return 0


def _eos_ids(config: Any) -> set[int]:
    eos = config.eos_token_id
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in (eos.tolist() if isinstance(eos, torch.Tensor) else eos)}


def _left_padded(rows: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """``(len(rows), longest)`` int64, each row's ids at the right."""
    width = max(len(r) for r in rows)
    return torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], dtype=torch.int64, device=device)


def _check_grammars(grammars: Any) -> list[CompiledGrammar]:
    """One grammar, or a non-empty list of them over one vocabulary, as a list."""
    if isinstance(grammars, CompiledGrammar):
        return [grammars]
    if isinstance(grammars, (str, bytes)) or not isinstance(grammars, Sequence) or not grammars:
        raise InvalidParameterError("grammars", type(grammars).__name__, "a compiled grammar or a non-empty list of them")
    for i, grammar in enumerate(grammars):
        check_instance(f"grammars[{i}]", grammar, CompiledGrammar, "a compiled grammar (GrammarCompiler.compile)")
    sizes = sorted({grammar.tokenizer_info.vocab_size for grammar in grammars})
    if len(sizes) > 1:
        raise InvalidParameterError("grammars", f"vocabulary sizes {sizes}", "grammars compiled for one tokenizer")
    return list(grammars)


def _check_call(input_ids: Any, scores: Any) -> None:
    check_tensor("input_ids", input_ids)
    if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise InvalidParameterError("input_ids", f"<tensor {input_ids.dtype} {tuple(input_ids.shape)}>", "(rows, length) token ids")
    check_tensor("scores", scores)
    if scores.dim() != 2 or not scores.dtype.is_floating_point or scores.shape[0] != input_ids.shape[0]:
        raise InvalidParameterError(
            "scores", f"<tensor {scores.dtype} {tuple(scores.shape)}>", f"({input_ids.shape[0]}, vocab) floats, a row per input_ids row"
        )


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


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
