"""Stop conditions, checked on the host after each step, with incremental detokenization.

One :class:`StopChecker` per request. ``step(token_id)`` appends the token, turns its bytes into text
without breaking a UTF-8 sequence that spans tokens (the incomplete tail waits for the next token), and
says whether the request is finished and why:

- ``"no_allowed_token"``: the sampler found nothing allowed (it returned :data:`~grammask.sampler.NO_TOKEN`);
- ``"stop"``: EOS (unless ``ignore_eos``), one of ``stop_token_ids``, a ``stop`` string (also one spanning
  several tokens) or a ``stop_regex`` match — the first to occur in the text wins; none of these count
  before ``min_new_tokens`` tokens (as vLLM);
- ``"length"``: ``max_new_tokens`` tokens were generated.

The matched stop (a string, the regex's matched text, or a token id) is reported. The text is cut
before the stop unless ``no_stop_trim`` (then it ends right after the stop). Special tokens (EOS among
them) never add text. The token ids always include the final token.
"""

from __future__ import annotations

import codecs
import enum
from dataclasses import dataclass
from typing import Sequence

import regex

from grammask.checks import as_int, check_instance
from grammask.errors import InvalidParameterError
from grammask.sampler.params import SamplingParams
from grammask.sampler.sampler import NO_TOKEN
from grammask.tokenizer import TokenizerInfo

__all__ = ["FinishReason", "Finish", "IncrementalDetokenizer", "StopChecker"]

STOP_REGEX_SECONDS = 1.0
"""The time one stop regex may take on the output so far: ``regex`` backtracks (``(a+)+$``), and a
pattern past it is reported by name rather than left to stall the request."""


class FinishReason(str, enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    NO_ALLOWED_TOKEN = "no_allowed_token"


@dataclass(frozen=True)
class Finish:
    """Why a request ended. ``matched``: the stop string, the regex's matched text, or the stop token id."""

    reason: FinishReason
    matched: str | int | None = None


class IncrementalDetokenizer:
    """Token bytes in, text out, never splitting a UTF-8 sequence; invalid bytes become U+FFFD."""

    def __init__(self, tokenizer: TokenizerInfo) -> None:
        self._tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text completed by ``token_id`` (possibly ``""`` while a multi-byte character is incomplete)."""
        if self._tokenizer.is_special(token_id):
            return ""
        return self._decoder.decode(self._tokenizer.token_bytes[token_id], final=False)

    def flush(self) -> str:
        """Whatever bytes are pending, decoded with replacement."""
        return self._decoder.decode(b"", final=True)


class StopChecker:
    """The stop conditions of one request.

    Attributes:
        token_ids: the ids generated so far.
        text: the text so far (cut at the stop once finished, unless ``no_stop_trim``).
        finish: ``None`` while running.
    """

    def __init__(self, params: SamplingParams, tokenizer: TokenizerInfo, eos_ids: Sequence[int] | None = None) -> None:
        self.params = check_instance("params", params, SamplingParams, "SamplingParams")
        self.tokenizer = check_instance("tokenizer", tokenizer, TokenizerInfo, "a grammask TokenizerInfo")
        if eos_ids is not None:
            eos_ids = [as_int(f"eos_ids[{i}]", token, low=0) for i, token in enumerate(eos_ids)]
        self._eos = frozenset(() if params.ignore_eos else (tokenizer.eos_ids if eos_ids is None else eos_ids))
        self._stop_ids = frozenset(params.stop_token_ids)
        self._patterns = [regex.compile(p) for p in params.stop_regex]
        self._longest_stop = max((len(s) for s in params.stop), default=0)
        self._detokenizer = IncrementalDetokenizer(tokenizer)
        self.token_ids: list[int] = []
        self.text = ""
        self.finish: Finish | None = None

    def step(self, token_id: int) -> Finish | None:
        """Take one sampled token; return the finish when the request ends with it.

        Raises:
            InvalidParameterError: a token id that is neither :data:`NO_TOKEN` nor in the vocabulary, or
                a step after the request finished.
        """
        if self.finish is not None:
            raise InvalidParameterError("token_id", token_id, f"no more tokens: the request finished ({self.finish.reason.value})")
        token_id = as_int("token_id", token_id, low=NO_TOKEN, high=self.tokenizer.vocab_size - 1)
        if token_id == NO_TOKEN:
            return self._end(Finish(FinishReason.NO_ALLOWED_TOKEN))
        self.token_ids.append(token_id)
        may_stop = len(self.token_ids) >= self.params.min_new_tokens
        if may_stop and (token_id in self._eos or token_id in self._stop_ids):
            if self.params.no_stop_trim:
                self.text += self._detokenizer.push(token_id)  # a special token adds nothing
            self.text += self._detokenizer.flush()
            return self._end(Finish(FinishReason.STOP, token_id))
        new_text = self._detokenizer.push(token_id)
        self.text += new_text
        if may_stop and new_text:
            found = self._find_stop(len(new_text))
            if found is not None:
                return found
        max_new = self.params.max_new_tokens
        if max_new is not None and len(self.token_ids) >= max_new:
            self.text += self._detokenizer.flush()
            return self._end(Finish(FinishReason.LENGTH))
        return None

    def _find_stop(self, new_chars: int) -> Finish | None:
        """The earliest stop string or regex match that involves the newest text."""
        best: tuple[int, int, str] | None = None  # (start, end, matched)
        window_start = max(0, len(self.text) - new_chars - self._longest_stop + 1)
        for stop in self.params.stop:
            at = self.text.find(stop, window_start)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, at + len(stop), stop)
        newest = len(self.text) - new_chars
        for pattern in self._patterns:
            try:
                match = next((m for m in pattern.finditer(self.text, timeout=STOP_REGEX_SECONDS) if m.end() > newest), None)
            except TimeoutError:
                raise InvalidParameterError(
                    "stop_regex", pattern.pattern, f"a pattern that decides within {STOP_REGEX_SECONDS:g} s (it backtracks on this output)"
                ) from None
            if match is not None and (best is None or match.start() < best[0]):
                best = (match.start(), match.end(), match.group(0))
        if best is None:
            return None
        start, end, matched = best
        self.text = self.text[: end if self.params.no_stop_trim else start]
        return self._end(Finish(FinishReason.STOP, matched))

    def _end(self, finish: Finish) -> Finish:
        self.finish = finish
        return finish
