"""Stop conditions with incremental detokenization, on the real Llama-3.2 tokenizer and the tiny one."""

from __future__ import annotations

import pytest
import regex

from grammask.errors import InvalidParameterError
from grammask.sampler import NO_TOKEN, SamplingParams
from grammask.sampler.stop import FinishReason, IncrementalDetokenizer, StopChecker


def feed(checker: StopChecker, ids):
    for token in ids:
        finish = checker.step(token)
        if finish is not None:
            return finish
    return None


def encode(llama_hf, text: str) -> list[int]:
    return llama_hf.encode(text, add_special_tokens=False)


def test_detokenizer_never_splits_utf8(llama_info, llama_hf):
    text = "héllo wörld 🤗 日本語 ok"
    ids = encode(llama_hf, text)
    detokenizer = IncrementalDetokenizer(llama_info)
    pieces = [detokenizer.push(i) for i in ids]
    assert "".join(pieces) + detokenizer.flush() == text
    assert all("\ufffd" not in piece for piece in pieces)
    assert any(piece == "" for piece in pieces)  # the emoji spans tokens: its first token emits nothing


def test_invalid_bytes_become_replacement_characters(tiny_info):
    checker = StopChecker(SamplingParams(max_new_tokens=2), tiny_info)
    assert feed(checker, [0xC3, ord("a")]).reason is FinishReason.LENGTH
    assert checker.text == "\ufffda"
    checker = StopChecker(SamplingParams(max_new_tokens=1), tiny_info)
    feed(checker, [0xE6])  # a cut-off sequence at the end is flushed
    assert checker.text == "\ufffd"


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_stop_string_spanning_tokens(llama_info, llama_hf, no_stop_trim):
    ids = encode(llama_hf, "The answer is 42.\n\nQuestion: more")
    checker = StopChecker(SamplingParams(stop=["\n\nQuest", "never"], no_stop_trim=no_stop_trim), llama_info)
    finish = feed(checker, ids)
    assert finish.reason is FinishReason.STOP and finish.matched == "\n\nQuest"
    assert checker.text == ("The answer is 42.\n\nQuest" if no_stop_trim else "The answer is 42.")
    assert len(checker.token_ids) < len(ids)


def test_earliest_stop_wins_between_strings_and_regex(llama_info, llama_hf):
    ids = encode(llama_hf, "call 555-1234 now STOP")
    checker = StopChecker(SamplingParams(stop=["now"], stop_regex=[r"\d{3}-\d{4}"]), llama_info)
    finish = feed(checker, ids)
    assert finish.matched == "555-1234" and checker.text == "call "


def test_stop_regex_matches_like_the_regex_module(llama_info, llama_hf):
    text = "a1 b22 c333 d4444"
    pattern = r"[a-z]\d{3}\b"
    checker = StopChecker(SamplingParams(stop_regex=pattern), llama_info)
    finish = feed(checker, encode(llama_hf, text))
    match = regex.search(pattern, text)
    assert finish.matched == match.group(0) and checker.text == text[: match.start()]


def test_eos_and_stop_token_ids_and_ignore_eos(llama_info, llama_hf):
    eos = llama_info.eos_ids[0]
    ids = encode(llama_hf, "done") + [eos] + encode(llama_hf, " more")
    checker = StopChecker(SamplingParams(), llama_info)
    finish = feed(checker, ids)
    assert (finish.reason, finish.matched, checker.text) == (FinishReason.STOP, eos, "done")
    assert checker.token_ids[-1] == eos
    checker = StopChecker(SamplingParams(ignore_eos=True, max_new_tokens=len(ids)), llama_info)
    assert feed(checker, ids).reason is FinishReason.LENGTH and checker.text == "done more"
    comma = encode(llama_hf, ",")[0]
    checker = StopChecker(SamplingParams(stop_token_ids=[comma]), llama_info)
    assert feed(checker, encode(llama_hf, "a, b")).matched == comma and checker.text == "a"


def test_min_new_tokens_defers_every_stop(llama_info, llama_hf):
    ids = encode(llama_hf, "x STOP y STOP z")
    checker = StopChecker(SamplingParams(stop="STOP", min_new_tokens=3), llama_info)
    finish = feed(checker, ids)
    assert finish.matched == "STOP" and checker.text == "x STOP y "
    checker = StopChecker(SamplingParams(stop_regex=r"S\w+", min_new_tokens=3), llama_info)
    feed(checker, ids)
    assert checker.finish.matched == "STOP" and checker.text == "x STOP y "


def test_max_new_tokens_and_no_allowed_token(tiny_info):
    checker = StopChecker(SamplingParams(max_new_tokens=3), tiny_info)
    assert [checker.step(t) for t in b"abc"][:2] == [None, None]
    assert checker.finish.reason is FinishReason.LENGTH and checker.text == "abc"
    with pytest.raises(InvalidParameterError, match=r"expected no more tokens: the request finished \(length\)"):
        checker.step(ord("d"))
    checker = StopChecker(SamplingParams(), tiny_info)
    assert checker.step(NO_TOKEN).reason is FinishReason.NO_ALLOWED_TOKEN and checker.token_ids == []


def test_special_tokens_add_no_text(tiny_info):
    pad = tiny_info.eos_ids[0] + 1
    checker = StopChecker(SamplingParams(max_new_tokens=3), tiny_info)
    feed(checker, [ord("a"), pad, ord("b")])
    assert checker.text == "ab"
