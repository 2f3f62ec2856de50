"""grammask as vLLM's structured-output backend.

Turn it on (vLLM 0.33):

    pip install grammask            # declares the vllm.general_plugins entry point
    GRAMMASK_VLLM=1 vllm serve meta-llama/Llama-3.2-1B-Instruct \\
        --enable-auto-tool-choice --tool-call-parser llama3_json

Every structured request (``response_format``, ``structured_outputs``, tool calls that vLLM turns into
a grammar) is then compiled and masked by grammask; a bad schema is a 400 whose message says where.
In a Python process that builds ``vllm.LLM`` itself, call ``grammask.integrations.vllm.enable()``
first (or set ``GRAMMASK_VLLM=1``): see :func:`gpu_demo`.

A full vLLM engine needs a GPU build of vLLM. On a CPU machine, ``python examples/vllm_backend.py``
runs :func:`cpu_demo` instead: vLLM's real ``StructuredOutputManager`` (with a real ``VllmConfig``,
``Request`` and ``SamplingParams``) and grammask's backend, driving a random-weight tiny Llama the way
the engine core does (compile on the manager's threads, fill the bitmask, mask, sample, accept).
"""

from __future__ import annotations

import json
import tempfile
import time

import torch

SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def gpu_demo(model: str = "meta-llama/Llama-3.2-1B-Instruct") -> None:  # pragma: no cover - needs a GPU
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from grammask.integrations.vllm import enable

    enable()
    llm = LLM(model=model)
    params = SamplingParams(max_tokens=64, structured_outputs=StructuredOutputsParams(json=SCHEMA))
    out = llm.chat([{"role": "user", "content": "Weather in Rome for 3 days, as JSON."}], params)
    print(out[0].outputs[0].text)


def cpu_demo(verbose: bool = True) -> dict[str, str]:
    """Decode one JSON and one regex request through vLLM's manager with grammask; returns the texts."""
    from grammask.integrations.vllm import enable

    enable()
    with tempfile.TemporaryDirectory(prefix="grammask-vllm-") as folder:  # the model's config and tokenizer files
        return _decode_in(folder, verbose)


def _decode_in(folder: str, verbose: bool) -> dict[str, str]:
    from transformers import LlamaConfig, LlamaForCausalLM
    from vllm.config import DeviceConfig, ModelConfig, SchedulerConfig, StructuredOutputsConfig, VllmConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    from grammask import apply_mask, bundled

    config = LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, bos_token_id=128000, eos_token_id=[128001, 128008, 128009])
    config.save_pretrained(folder)
    tokenizer = bundled.llama32_hf_tokenizer()
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=folder, tokenizer=folder, dtype="float32"),
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(max_num_seqs=8, max_model_len=512, is_encoder_decoder=False),
        structured_outputs_config=StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True),
    )
    manager = StructuredOutputManager(vllm_config)
    prompt = tokenizer.encode("Weather as JSON:")
    requests = {
        "json": Request("json", prompt, SamplingParams(max_tokens=48, temperature=0.0, structured_outputs=StructuredOutputsParams(json=SCHEMA)), None),
        "regex": Request("regex", prompt, SamplingParams(max_tokens=16, temperature=0.0, structured_outputs=StructuredOutputsParams(regex=r"(sun|rain)-[0-9]")), None),
    }
    for request in requests.values():
        request.sampling_params.verify(vllm_config.model_config, None, vllm_config.structured_outputs_config, manager.tokenizer)
        manager.grammar_init(request)  # compiles on the manager's thread pool
    while not all(r.structured_output_request.is_grammar_ready for r in requests.values()):
        time.sleep(0.01)
    bias = torch.zeros(128256)  # a nudge toward closing tokens, so the random model ends soon
    bias[[tokenizer.convert_tokens_to_ids(t) for t in ["}", "7", "sun"]] + [128009]] = 8.0
    live = list(requests.values())
    while live:
        bitmask = torch.from_numpy(manager.grammar_bitmask({r.request_id: r for r in live}, [r.request_id for r in live], {}).copy())
        with torch.no_grad():
            logits = torch.stack([model(torch.tensor([list(r.all_token_ids)])).logits[0, -1] for r in live]) + bias
        apply_mask(logits, bitmask)
        for request, token in zip(live, logits.argmax(-1).tolist()):
            manager.accept_tokens(request, [token])
            request.append_output_token_ids(token)
        live = [r for r in live if not r.structured_output_request.grammar.is_terminated() and r.num_output_tokens < r.sampling_params.max_tokens]
    texts = {name: tokenizer.decode(list(r.output_token_ids), skip_special_tokens=True) for name, r in requests.items()}
    if verbose:
        grammar = requests["json"].structured_output_request.grammar
        print(f"backend: {type(manager.backend).__name__}; JSON grammar by grammask's {grammar.compiled.backend!r}")
        print(json.dumps(texts, indent=1, ensure_ascii=False))
    return texts


if __name__ == "__main__":
    if torch.cuda.is_available():
        gpu_demo()
    else:
        cpu_demo()
