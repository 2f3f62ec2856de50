"""grammask as an SGLang grammar backend.

Turn it on (SGLang 0.5.23):

    pip install grammask            # declares the sglang.srt.plugins entry point (registers "grammask")
    python -m sglang.launch_server --model-path Qwen/Qwen3-8B --grammar-backend grammask \\
        --reasoning-parser qwen3 --tool-call-parser qwen25

``response_format`` / ``regex`` / ``ebnf`` / ``structural_tag`` requests are then compiled and masked by
grammask; with ``--reasoning-parser`` SGLang's own reasoner wrapper keeps the think section free. In a
Python process that builds ``sglang.Engine`` itself, call ``grammask.integrations.sglang.register()``
first and pass ``grammar_backend="grammask"``: see :func:`gpu_demo`.

A full SGLang engine needs a GPU. On a CPU machine, ``python examples/sglang_backend.py`` runs
:func:`cpu_demo`: SGLang's grammar objects as its scheduler drives them (cached compile on the
backend's executor, ``copy()`` per request, ``allocate_vocab_mask`` → ``fill_vocab_mask_batched`` →
``GrammarMask.apply`` → ``accept_token``), over a random-weight tiny Llama.
"""

from __future__ import annotations

import json
from concurrent.futures import Future

import torch

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}


def gpu_demo(model: str = "Qwen/Qwen3-8B") -> None:  # pragma: no cover - needs a GPU
    import sglang

    from grammask.integrations.sglang import register

    register()
    engine = sglang.Engine(model_path=model, grammar_backend="grammask", reasoning_parser="qwen3")
    out = engine.generate("Answer as JSON:", {"json_schema": json.dumps(SCHEMA), "max_new_tokens": 256})
    print(out["text"])


def cpu_demo(verbose: bool = True) -> dict[str, str]:
    """Decode a JSON and a regex request with SGLang's grammar calls over grammask; returns the texts."""
    from sglang.srt.constrained.base_grammar_backend import GrammarMask, GrammarRow
    from transformers import LlamaConfig, LlamaForCausalLM

    from grammask import bundled
    from grammask.integrations.sglang import GrammaskGrammarBackend, register

    register()  # what the entry point does in each SGLang process
    tokenizer = bundled.llama32_hf_tokenizer()
    backend = GrammaskGrammarBackend(tokenizer, vocab_size=128256, eos_token_ids={128001, 128009})
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    grammars = []
    for key in [("json", json.dumps(SCHEMA)), ("regex", r"(cat|dog)-[0-9]")]:
        value, hit = backend.get_cached_or_future_value(key, False)  # compiles on the backend's executor
        grammar = value.result() if isinstance(value, Future) else value
        backend.set_cache(key, grammar.copy())  # later requests with this key get a fresh copy
        grammars.append(grammar)
    bias = torch.zeros(128256)  # a nudge toward closing tokens, so the random model ends soon
    bias[[tokenizer.convert_tokens_to_ids(t) for t in ["}", "true", "cat", "1"]] + [128009]] = 8.0
    prompt = tokenizer.encode("Answer:")
    outputs: list[list[int]] = [[] for _ in grammars]
    while any(not g.is_terminated() for g in grammars):
        rows = [GrammarRow(i, g) for i, g in enumerate(grammars) if not g.is_terminated()]
        mask = grammars[0].allocate_vocab_mask(vocab_size=128256, batch_size=len(grammars), device="cpu")
        grammars[0].fill_vocab_mask_batched(rows, mask)
        with torch.no_grad():
            logits = torch.stack([model(torch.tensor([prompt + out])).logits[0, -1] for out in outputs]) + bias
        GrammarMask(grammars[0], grammars[0].move_vocab_mask(mask, "cpu")).apply(logits)
        for row in rows:
            token = int(logits[row.row].argmax())
            row.grammar.accept_token(token)
            outputs[row.row].append(token)
    texts = {name: tokenizer.decode(out, skip_special_tokens=True) for name, out in zip(["json", "regex"], outputs)}
    if verbose:
        print(f"JSON grammar by grammask's {grammars[0].compiled.backend!r}")
        print(json.dumps(texts, indent=1, ensure_ascii=False))
    return texts


if __name__ == "__main__":
    if torch.cuda.is_available():
        gpu_demo()
    else:
        cpu_demo()
