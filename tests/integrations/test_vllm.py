"""grammask inside vLLM 0.33's real structured-output manager (``StructuredOutputManager``), with a
real ``VllmConfig``, real ``Request`` / ``SamplingParams`` objects and the Llama-3.2 tokenizer.

The tests replay the engine core's mask loop around the manager: the scheduler trims drafts with
``validate_tokens``, the manager fills one row per draft plus one (accepting the drafts and rolling
them back), a random-weight tiny Llama scores the rows under their masks, greedy rejection keeps the
drafts the target agrees with plus one token, and ``accept_tokens`` advances the grammar. Above 128
requests the manager fills from its thread pool. Outputs are checked with jsonschema, the regex
module, and vLLM's own Llama tool parser.
"""

from __future__ import annotations

import json
import random
import time

import jsonschema
import pytest
import regex
import torch

pytest.importorskip("vllm.v1.structured_output", reason="vLLM 0.33 (pip install --no-deps vllm==0.33.0 and the engines extra)")

from vllm.config import (  # noqa: E402
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    StructuredOutputsConfig,
    VllmConfig,
)
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.sampling_params import SamplingParams, StructuredOutputsParams  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputBackend, StructuredOutputGrammar  # noqa: E402

from grammask import apply_mask, bitmask_to_bool  # noqa: E402
from grammask.integrations import vllm as gm_vllm  # noqa: E402
from grammask.masking.bitmask import allocate_token_bitmask  # noqa: E402
from tests.tiny_models import tiny_llama  # noqa: E402

WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
PERSON = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
LLAMA_CALL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [
            {"type": "token", "token": "<|python_tag|>"},
            {
                "type": "tag",
                "begin": '{"name": "get_weather", "parameters": ',
                "content": {"type": "json_schema", "json_schema": WEATHER},
                "end": "}",
            },
        ],
    },
}
KINDS = {
    "json": (StructuredOutputsParams(json=WEATHER), lambda text: jsonschema.validate(json.loads(text), WEATHER)),
    "json_object": (StructuredOutputsParams(json_object=True), lambda text: isinstance(json.loads(text), dict) or pytest.fail(text)),
    "regex": (StructuredOutputsParams(regex=r"[a-c]{2,5}-\d"), lambda text: regex.fullmatch(r"[a-c]{2,5}-\d", text) or pytest.fail(text)),
    "choice": (StructuredOutputsParams(choice=["yes", "no", "a|b"]), lambda text: text in ("yes", "no", "a|b") or pytest.fail(text)),
    "grammar": (StructuredOutputsParams(grammar='root ::= "up" | "down" [0-9]'), lambda text: regex.fullmatch(r"up|down\d", text) or pytest.fail(text)),
    "structural_tag": (StructuredOutputsParams(structural_tag=json.dumps(LLAMA_CALL_TAG)), None),
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, llama_hf):
    from transformers import LlamaConfig

    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, bos_token_id=128000, eos_token_id=[128001, 128008, 128009]).save_pretrained(folder)
    llama_hf.save_pretrained(folder)
    return str(folder)


def _config(model_dir: str, *, max_num_seqs: int, spec_tokens: int = 0, **outputs) -> VllmConfig:
    model = ModelConfig(model=model_dir, tokenizer=model_dir, dtype="float32")
    parallel = ParallelConfig()
    speculative = None
    if spec_tokens:
        speculative = SpeculativeConfig(method="ngram", num_speculative_tokens=spec_tokens, prompt_lookup_max=3,
                                        prompt_lookup_min=1, target_model_config=model, target_parallel_config=parallel)
    return VllmConfig(
        model_config=model, parallel_config=parallel, device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_model_len=2048, is_encoder_decoder=False),
        speculative_config=speculative, structured_outputs_config=StructuredOutputsConfig(**outputs),
    )


@pytest.fixture(scope="module")
def enabled():
    gm_vllm.enable()
    gm_vllm.enable()  # idempotent


@pytest.fixture(scope="module")
def plain_config(model_dir):
    return _config(model_dir, max_num_seqs=256, backend="xgrammar", disable_any_whitespace=True)


@pytest.fixture(scope="module")
def spec_config(model_dir):
    return _config(model_dir, max_num_seqs=8, spec_tokens=3)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=1)


class Replay:
    """The engine core's use of the manager, one step at a time (greedy, a tiny random model)."""

    def __init__(self, config: VllmConfig, model, closing_ids: list[int]) -> None:
        self.config = config
        self.manager = StructuredOutputManager(config)
        self.model = model
        self.stride = config.num_speculative_tokens + 1
        # A nudge toward tokens that close structures, so a random model ends within the test's budget.
        self.bias = torch.zeros(model.config.vocab_size)
        self.bias[closing_ids] = 8.0

    def start(self, requests: list[Request]) -> None:
        tokenizer = self.manager.tokenizer
        for request in requests:
            request.sampling_params.verify(self.config.model_config, self.config.speculative_config,
                                           self.config.structured_outputs_config, tokenizer)
            self.manager.grammar_init(request)
        deadline = time.monotonic() + 120
        while not all(r.structured_output_request.is_grammar_ready for r in requests):
            assert time.monotonic() < deadline, "grammars did not compile"
            time.sleep(0.01)
        for request in requests:
            grammar = request.structured_output_request.grammar
            assert isinstance(grammar, gm_vllm.GrammaskGrammar), grammar

    def logits(self, token_ids: list[int], positions: int) -> torch.Tensor:
        with torch.no_grad():
            out = self.model(torch.tensor([token_ids])).logits[0, -positions:].float()
        return out + self.bias

    def step(self, requests: list[Request], drafts: dict[str, list[int]]) -> dict[str, list[int]]:
        """One engine step: trim drafts, fill rows, score under the masks, accept. Returns each
        request's new tokens."""
        scheduled = {r.request_id: self.manager.validate_tokens(r, drafts.get(r.request_id, [])) for r in requests}
        before = {r.request_id: _grammar(r).matcher.num_accepted for r in requests}
        expected = {r.request_id: _rows_by_fork(_grammar(r), scheduled[r.request_id]) for r in requests}
        bitmask = self.manager.grammar_bitmask({r.request_id: r for r in requests}, [r.request_id for r in requests], scheduled)
        new_tokens = {}
        for i, request in enumerate(requests):
            grammar, draft = _grammar(request), scheduled[request.request_id]
            assert grammar.matcher.num_accepted == before[request.request_id]  # the drafts were rolled back
            rows = torch.from_numpy(bitmask[i * self.stride : i * self.stride + len(draft) + 1].copy())
            assert torch.equal(rows, expected[request.request_id]), "a draft row differs from the grammar's own"
            logits = self.logits(list(request.all_token_ids) + draft, len(draft) + 1)
            apply_mask(logits, rows)
            picks = logits.argmax(-1).tolist()
            accepted = []
            for position, token in enumerate(draft):
                if picks[position] != token:
                    break
                accepted.append(token)
            accepted.append(picks[len(accepted)])
            if grammar.is_terminated():
                accepted = []
            assert self.manager.accept_tokens(request, accepted)
            request.append_output_token_ids(accepted)
            new_tokens[request.request_id] = accepted
        return new_tokens

    def run(self, requests: list[Request], max_steps: int, drafter=None) -> None:
        live = list(requests)
        for _ in range(max_steps):
            drafts = {r.request_id: drafter(r) for r in live} if drafter else {}
            self.step(live, drafts)
            live = [r for r in live if not _grammar(r).is_terminated()]
            if not live:
                return
        pytest.fail(f"{[r.request_id for r in live]} did not finish in {max_steps} steps")


def _grammar(request: Request) -> gm_vllm.GrammaskGrammar:
    return request.structured_output_request.grammar


def _rows_by_fork(grammar: gm_vllm.GrammaskGrammar, draft: list[int]) -> torch.Tensor:
    """The rows a request should get: its matcher's mask after each prefix of the draft (every token
    allowed once it has ended: vLLM does not constrain a finished grammar)."""
    fork = grammar.matcher.fork()
    rows = allocate_token_bitmask(len(draft) + 1, grammar.vocab_size)
    for position in range(len(draft) + 1):
        if not fork.is_terminated():
            fork.fill_next_token_bitmask(rows, position)
        if position < len(draft):
            assert fork.accept_token(draft[position])
    return rows


def _request(rid: str, outputs: StructuredOutputsParams, prompt: list[int]) -> Request:
    return Request(rid, prompt, SamplingParams(max_tokens=64, temperature=0.0, structured_outputs=outputs), None)


def _closing_ids(llama_hf) -> list[int]:
    return [llama_hf.convert_tokens_to_ids(t) for t in ["}", '"', "\"}", "7", "up"]] + [128009]


def _text(request: Request, llama_hf) -> str:
    return llama_hf.decode(list(request.output_token_ids), skip_special_tokens=True)


def test_backend_and_grammar_subclass_vllms_classes():
    assert issubclass(gm_vllm.GrammaskBackend, StructuredOutputBackend)
    assert issubclass(gm_vllm.GrammaskGrammar, StructuredOutputGrammar)


def test_every_request_kind_end_to_end(enabled, plain_config, model, llama_hf):
    from vllm.tool_parsers.llama_tool_parser import Llama3JsonToolParser

    replay = Replay(plain_config, model, _closing_ids(llama_hf))
    prompt = llama_hf.encode("Answer:", add_special_tokens=True)
    requests = [_request(kind, outputs, prompt) for kind, (outputs, _) in KINDS.items()]
    replay.start(requests)
    assert isinstance(replay.manager.backend, gm_vllm.GrammaskBackend)
    assert _grammar(requests[0]).compiled.backend == "fsm"  # JSON Schemas get the exact backend
    replay.run(requests, max_steps=60)
    for request, (kind, (_, check)) in zip(requests, KINDS.items()):
        text = _text(request, llama_hf)
        if check is not None:
            check(text)
    call = requests[-1]
    assert call.output_token_ids[0] == 128010  # <|python_tag|>, the one place it is allowed
    assert 128010 not in list(call.output_token_ids)[1:]
    parser = Llama3JsonToolParser(replay.manager.tokenizer)
    extracted = parser.extract_tool_calls(llama_hf.decode(list(call.output_token_ids), skip_special_tokens=False), None)
    assert extracted.tools_called and extracted.tool_calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(extracted.tool_calls[0].function.arguments), WEATHER)


def test_speculative_rows_drafts_trimmed_and_rolled_back(enabled, spec_config, model, llama_hf):
    replay = Replay(spec_config, model, _closing_ids(llama_hf))
    prompt = llama_hf.encode("Answer:", add_special_tokens=True)
    requests = [_request("json", StructuredOutputsParams(json=WEATHER), prompt),
                _request("regex", StructuredOutputsParams(regex=r"[a-c]{2,9}-\d"), prompt)]
    replay.start(requests)
    rng = random.Random(3)

    def drafter(request: Request) -> list[int]:
        """Three drafts the grammar allows, one of them sometimes replaced by a token it does not."""
        fork = _grammar(request).matcher.fork()
        draft = []
        row = allocate_token_bitmask(1, 128256)
        for _ in range(3):
            fork.fill_next_token_bitmask(row, 0)
            allowed = bitmask_to_bool(row[0], 128256).nonzero().flatten().tolist()
            if not allowed or fork.is_terminated():
                break
            token = rng.choice(allowed)
            draft.append(token)
            fork.accept_token(token)
        if draft and rng.random() < 0.4:
            draft[rng.randrange(len(draft))] = llama_hf.convert_tokens_to_ids("zzz") or 0
        return draft

    replay.run(requests, max_steps=60, drafter=drafter)
    jsonschema.validate(json.loads(_text(requests[0], llama_hf)), WEATHER)
    assert regex.fullmatch(r"[a-c]{2,9}-\d", _text(requests[1], llama_hf))


def test_above_128_requests_rows_are_filled_from_threads(enabled, plain_config, model, llama_hf):
    replay = Replay(plain_config, model, _closing_ids(llama_hf))
    prompt = llama_hf.encode("Go", add_special_tokens=True)
    kinds = list(KINDS.values())
    requests = [_request(f"r{i}", kinds[i % len(kinds)][0], prompt) for i in range(130)]
    replay.start(requests)
    manager = replay.manager
    assert manager.fill_bitmask_parallel_threshold < len(requests)
    rng = random.Random(7)
    for _ in range(4):
        live = [r for r in requests if not _grammar(r).is_terminated()]
        expected = [_rows_by_fork(_grammar(r), [])[0] for r in live]
        bitmask = torch.from_numpy(manager.grammar_bitmask({r.request_id: r for r in live}, [r.request_id for r in live], {}).copy())
        for position, request in enumerate(live):  # the pool's rows equal each grammar's own fill
            assert torch.equal(bitmask[position], expected[position]), request.request_id
            token = rng.choice(bitmask_to_bool(bitmask[position], 128256).nonzero().flatten().tolist())
            assert manager.accept_tokens(request, [token])


def test_bad_requests_are_400s_that_name_the_problem(enabled, plain_config, llama_hf):
    tokenizer = llama_hf
    for outputs, message in [
        (StructuredOutputsParams(json={"type": "object", "properties": {"a": {"type": "strng"}}}), "structured_outputs.json"),
        (StructuredOutputsParams(regex="a(b"), "invalid regex"),
        (StructuredOutputsParams(grammar="start: 'a'"), "structured_outputs.grammar"),
        (StructuredOutputsParams(choice=[]), "structured_outputs.choice"),
    ]:
        params = SamplingParams(structured_outputs=outputs)
        with pytest.raises(VLLMValidationError, match=message):
            params.verify(plain_config.model_config, None, plain_config.structured_outputs_config, tokenizer)


def test_register_is_a_no_op_unless_enabled_and_checks_the_version(monkeypatch):
    monkeypatch.delenv(gm_vllm.ENABLE_ENV, raising=False)
    monkeypatch.setattr(gm_vllm, "enable", lambda: pytest.fail("enabled without GRAMMASK_VLLM"))
    gm_vllm.register()
    monkeypatch.undo()
    monkeypatch.setattr(gm_vllm.vllm, "__version__", "0.40.1")
    with pytest.raises(gm_vllm.GrammaskError, match="supports vLLM 0.33.x; found 0.40.1"):
        gm_vllm.enable()


def test_the_plugin_entry_point_is_declared():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    target = pyproject["project"]["entry-points"]["vllm.general_plugins"]["grammask"]
    module, _, name = target.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is gm_vllm.register
