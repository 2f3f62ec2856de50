"""The fsm mask against an independent oracle on the real Llama-3.2 tokenizer.

The oracle is the ``regex`` module's partial matching: ``fullmatch(pattern, text, partial=True)``
says whether ``text`` can still be extended into a full match. Along a valid string (tokenized by
the Hugging Face tokenizer), at every step a sample of tokens is checked: random ones, ones the
mask allows, and ones that start like the true continuation. Only tokens (and prefixes) that
decode as whole UTF-8 characters are sampled; multi-byte splits are covered in test_matcher.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import regex

from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.spec import JsonSchema, Regex

from .helpers import allowed_ids

CASES = [
    (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", ["2024-03-15T12:30:45.123Z", "1999-12-31T23:59:59+05:30"]),
    (r"[a-z]+( [a-z]+)*", ["hello world this is fine"]),
    (r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"', ['"héllo \\"wörld\\" \\u00e9 😀 tab\\t"']),
    (r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}", ["john.doe+x@example.co.uk"]),
    (r"(café|naïve|日本語)+ ?[0-9]{1,3}", ["café日本語 42"]),
    (r'\{"name": "[a-zA-Z ]{1,20}", "age": (0|[1-9][0-9]?)\}', ['{"name": "Bob Smith", "age": 42}']),
    (r"(ab|cd)*(abc)?x{0,3}", ["ababcdabcxx"]),
]


@pytest.fixture(scope="module")
def backend(llama_info):
    return FsmBackend(llama_info)


@pytest.fixture(scope="module")
def clean_tokens(llama_info) -> dict[int, str]:
    out = {}
    for token, data in enumerate(llama_info.token_bytes):
        if llama_info.is_special(token) or not data:
            continue
        try:
            out[token] = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return out


@pytest.mark.parametrize(("pattern", "texts"), CASES, ids=[c[0][:24] for c in CASES])
def test_mask_agrees_with_partial_match_oracle(backend, llama_info, llama_hf, clean_tokens, pattern, texts) -> None:
    grammar = backend.compile(Regex(pattern))
    oracle = regex.compile(pattern, regex.ASCII)  # ECMA: \d and \w are ASCII
    rng = random.Random(hash(pattern) & 0xFFFF)
    clean_ids = list(clean_tokens)
    by_first: dict[str, list[int]] = {}
    for token, text in clean_tokens.items():
        by_first.setdefault(text[0], []).append(token)
    eos = llama_info.eos_ids[0]
    checked = 0
    for text in texts:
        assert oracle.fullmatch(text)
        tokens = llama_hf.encode(text, add_special_tokens=False)
        matcher = grammar.matcher()
        for step in range(len(tokens) + 1):
            prefix_bytes = llama_info.decode(tokens[:step])
            allowed = set(allowed_ids(matcher, llama_info).tolist())
            if not _mid_char(prefix_bytes):
                prefix = prefix_bytes.decode("utf-8")
                assert (eos in allowed) == (oracle.fullmatch(prefix) is not None), (pattern, prefix)
                rest = text[len(prefix) :]
                sample = set(rng.sample(clean_ids, 200))
                ordinary_allowed = sorted(allowed - set(llama_info.eos_ids))
                sample.update(rng.sample(ordinary_allowed, min(150, len(ordinary_allowed))))
                if rest:
                    sample.update(t for t in by_first.get(rest[0], []) if rest.startswith(clean_tokens[t][:1]))
                for token in sample:
                    if token not in clean_tokens:
                        continue
                    expected = oracle.fullmatch(prefix + clean_tokens[token], partial=True) is not None
                    assert (token in allowed) == expected, (pattern, prefix, clean_tokens[token])
                    checked += 1
            if step < len(tokens):
                assert matcher.accept_token(tokens[step]), (pattern, step)
        assert matcher.accept_token(eos) and matcher.is_terminated()
    assert checked > 500


def _mid_char(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _masks_along(grammar, ids: list[int]) -> list[np.ndarray]:
    """The packed mask before each of ``ids``, read by a fresh matcher of ``grammar`` that accepts them."""
    matcher = grammar.matcher()
    out = []
    for token in ids:
        out.append(matcher.allowed_words().copy())
        assert matcher.accept_token(token)
    return out


def test_rows_are_shared_between_matchers_and_threads(backend, llama_info) -> None:
    """Matchers of one grammar in several threads compute the same masks as one matcher alone."""
    from concurrent.futures import ThreadPoolExecutor

    pattern = r"[a-z]{1,8}(-[a-z0-9]{1,8}){0,4}"
    walk = "abc-de12-x"
    tokens = list(walk.encode())  # single-byte tokens exist in Llama-3's byte-level vocabulary
    ids = [llama_info._ids_by_text[bytes([b])] for b in tokens]

    reference = _masks_along(FsmBackend(llama_info).compile(Regex(pattern)), ids)
    shared = backend.compile(Regex(pattern))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _masks_along(shared, ids), range(8)))
    for result in results:
        assert all((a == b).all() for a, b in zip(result, reference))


def _longest_match_tokens(llama_info, text: bytes) -> list[int]:
    """A tokenization of ``text`` taking the longest vocabulary piece at each offset."""
    ids, offset = [], 0
    while offset < len(text):
        for end in range(min(len(text), offset + 16), offset, -1):
            found = llama_info._ids_by_text.get(text[offset:end])
            if found is not None:
                ids.append(found)
                offset = end
                break
    return ids


def test_masks_inside_an_open_objects_keys_agree_across_threads(llama_info) -> None:
    """Matchers of one open-object grammar in four threads compute the masks of one matcher
    alone: the key trie's rows derived from its body state and tokens read through the stacks
    as derivatives are built by whichever thread comes first."""
    from concurrent.futures import ThreadPoolExecutor

    spec = JsonSchema({"type": "object", "properties": {"name": {"type": "string"}, "nickname": {"type": "string"}, "n\u00e9e": {"type": "integer"}}})
    ids = _longest_match_tokens(llama_info, spec.serialize({"nickname": "Al", "n\u00e9e": 3, "nam": 1, "notes": "x"}).encode())
    assert any(len(llama_info.token_bytes[i]) > 1 for i in ids)

    reference = _masks_along(FsmBackend(llama_info).compile(spec), ids)
    shared = FsmBackend(llama_info).compile(spec)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _masks_along(shared, ids), range(8)))
    for result in results:
        assert all((a == b).all() for a, b in zip(result, reference))


def test_grammars_sharing_rows_from_several_threads_agree_with_rows_made_alone(llama_info, monkeypatch) -> None:
    """Four grammars that share string pieces no other test makes (a pattern, an other member's
    key), walked at once in four threads, so their shared rows are made and taken concurrently,
    compute the masks each grammar makes alone without the shared store."""
    from concurrent.futures import ThreadPoolExecutor

    from grammask.grammars.fsm.pushdown import SharedRuleRows

    piece = {"type": "string", "pattern": "^[k-q]+(-[0-4]+)?$"}
    specs = [JsonSchema({"type": "object", "properties": {f"p{i}": piece, "n": {"type": "integer"}}, "required": [f"p{i}"]})
             for i in range(4)]
    texts = [spec.serialize({f"p{i}": "klmnop-0123", "n": 7, "zz": ["kq", {"k": "q-1"}]}).encode() for i, spec in enumerate(specs)]
    ids = [_longest_match_tokens(llama_info, text) for text in texts]
    backend = FsmBackend(llama_info)
    taken, get = [], SharedRuleRows.get

    def counted_get(store, dfa, state):
        found = get(store, dfa, state)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(SharedRuleRows, "get", counted_get)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: _masks_along(backend.compile(specs[i]), ids[i]), range(4)))
    assert any(taken)
    monkeypatch.setattr(SharedRuleRows, "get", lambda store, dfa, state: None)
    for i, result in enumerate(results):
        reference = _masks_along(FsmBackend(llama_info).compile(specs[i]), ids[i])
        assert all((a == b).all() for a, b in zip(result, reference)), i
