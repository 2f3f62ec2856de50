"""SamplingParams validation and SamplingBatch construction checks: errors name the field, the value and what is allowed."""

from __future__ import annotations

import pytest
import torch

from grammask.errors import InvalidParameterError
from grammask.sampler import ProcessorSpec, SamplingBatch, SamplingParams


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"temperature": -0.1}, r"invalid temperature=-0.1: expected a finite number >= 0"),
        ({"temperature": float("nan")}, r"invalid temperature=nan"),
        ({"top_p": 0.0}, r"invalid top_p=0.0: expected a number in \(0, 1\]"),
        ({"top_p": 1.5}, r"invalid top_p=1.5"),
        ({"top_k": 0}, r"invalid top_k=0: expected -1 \(off\) or an int >= 1"),
        ({"top_k": 2.5}, r"invalid top_k=2.5"),
        ({"min_p": -0.01}, r"invalid min_p=-0.01: expected a number in \[0, 1\]"),
        ({"frequency_penalty": 2.5}, r"invalid frequency_penalty=2.5: expected a number in \[-2, 2\]"),
        ({"presence_penalty": -3}, r"invalid presence_penalty=-3"),
        ({"repetition_penalty": 0}, r"invalid repetition_penalty=0: expected a finite number > 0"),
        ({"min_new_tokens": 5, "max_new_tokens": 3}, r"invalid min_new_tokens=5: expected at most max_new_tokens=3"),
        ({"max_new_tokens": 0}, r"invalid max_new_tokens=0: expected None or an int >= 1"),
        ({"n": 0}, r"invalid n=0"),
        ({"n": 3, "best_of": 2}, r"invalid best_of=2: expected None or an int in \[n=3, 128\]"),
        ({"best_of": 129}, r"invalid best_of=129"),
        ({"prompt_logprobs": -1}, r"invalid prompt_logprobs=-1: expected None or an int in \[0, 1024\]"),
        ({"logprobs_mode": "processed"}, r"invalid logprobs_mode='processed': expected one of 'raw_logprobs'"),
        ({"seed": -1}, r"invalid seed=-1: expected None or an int in \[0, 2\*\*63\)"),
        ({"seed": 2**63}, r"invalid seed="),
        ({"stop": ["ok", ""]}, r"invalid stop=\['ok', ''\]: expected a non-empty string"),
        ({"stop_token_ids": [3, -2]}, r"invalid stop_token_ids=\[3, -2\]"),
        ({"stop_regex": "a("}, r"invalid stop_regex='a\(': expected a valid regex"),
        ({"logit_bias": {"x": 1.0}}, r"invalid logit_bias=\{'x': 1.0\}: expected token ids"),
        ({"logit_bias": {3: float("inf")}}, r"invalid logit_bias=inf: expected finite biases in \[-100, 100\]"),
        ({"logprobs": 5000}, r"invalid logprobs=5000: expected None or an int in \[0, 1024\]"),
        ({"logits_processors": [{"name": "pickle"}]}, r"invalid logits_processors='pickle': expected one of the registered"),
        ({"logits_processors": ["no_repeat_ngram"]}, r"expected \{'name': <registered name>"),
    ],
)
def test_bad_values_are_refused_with_field_value_and_allowed(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message):
        SamplingParams(**kwargs)


def test_normalised_values_and_derived_flags():
    params = SamplingParams(
        temperature=5e-7, stop="END", stop_regex=r"\d+", logit_bias={"12": -3},
        logits_processors=[{"name": "no_repeat_ngram", "params": {"ngram_size": 2}}],
    )
    assert params.is_greedy and params.stop == ("END",) and params.stop_regex == (r"\d+",)
    assert params.logit_bias == {12: -3.0}
    assert params.logits_processors == (ProcessorSpec("no_repeat_ngram", {"ngram_size": 2}),)
    with pytest.raises(TypeError):  # a structure is a spec beside the parameters, never a parameter
        SamplingParams(regex="[a-z]+")
    assert not SamplingParams(temperature=1e-6).is_greedy
    assert SamplingParams(top_k=5).needs_filter and not SamplingParams().needs_filter
    assert SamplingParams(presence_penalty=0.1).needs_penalties


def test_sampler_package_does_not_import_grammars():
    """DESIGN.md: the sampler knows nothing of grammars except the bitmask (checked on the import statements)."""
    import ast
    from pathlib import Path

    import grammask.sampler

    imported = set()
    for path in Path(grammask.sampler.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert "grammask.sampler.params" in imported  # the walk saw the package's own imports
    assert not any(name.startswith("grammask.grammars") for name in imported)


@pytest.mark.parametrize(
    "params,message",
    [
        (SamplingParams(logit_bias={50: 1.0}), r"invalid logit_bias=50: expected token ids in \[0, 10\)"),
        (SamplingParams(stop_token_ids=[10]), r"invalid stop_token_ids=10"),
        (SamplingParams(token_ids_logprobs=[99]), r"invalid token_ids_logprobs=99"),
        (
            SamplingParams(logits_processors=[{"name": "disallowed_tokens", "params": {"token_ids": [11]}}]),
            r"invalid disallowed_tokens.token_ids=\[11\]: expected a list of token ids in \[0, 10\)",
        ),
        (
            SamplingParams(logits_processors=[{"name": "no_repeat_ngram", "params": {"n": 2}}]),
            r"invalid no_repeat_ngram.params=\['n'\]: expected only the keys",
        ),
        (
            SamplingParams(logits_processors=[{"name": "thinking_budget", "params": {"budget": 3}}]),
            r"invalid thinking_budget.start='<think>': expected a tokenizer",
        ),
    ],
)
def test_batch_checks_ids_against_the_vocabulary(params, message):
    with pytest.raises(InvalidParameterError, match=message):
        SamplingBatch.build([params], vocab_size=10, eos_ids=[0])


def test_batch_tensors_and_flags():
    params = [SamplingParams(temperature=0), SamplingParams(top_k=3, seed=9), SamplingParams(frequency_penalty=1)]
    batch = SamplingBatch.build(params, vocab_size=10, eos_ids=[0])
    assert batch.temperature.tolist() == [1.0, 1.0, 1.0] and batch.top_k.tolist() == [10, 3, 10]
    assert batch.groups.greedy == [0] and batch.groups.filtered == [1] and batch.groups.full == [2]
    assert batch.groups.filtered_seeded == [True] and batch.has_seeded
    assert not batch.all_greedy and batch.needs_filter and batch.needs_penalties
    assert batch.penalties.rows.tolist() == [2] and batch.min_tokens is None
    assert batch.output_len.dtype == torch.int64 and batch.output_len.tolist() == [0, 0, 0]
    with pytest.raises(InvalidParameterError, match=r"invalid keep=\[3\]: expected row indices in \[0, 3\)"):
        batch.filter([3])


def test_sample_params_fan_out_with_derived_seeds():
    samples = SamplingParams(n=2, best_of=4, seed=2**63 - 2, temperature=0.7).sample_params()
    assert [p.seed for p in samples] == [2**63 - 2, 2**63 - 1, 0, 1]  # (seed + i) mod 2**63
    assert all(p.n == 1 and p.best_of is None and p.temperature == 0.7 for p in samples)
    assert all(p.logprobs == 0 for p in samples)  # best_of ranks by the chosen tokens' logprobs
    plain = SamplingParams(n=3, logprobs=4).sample_params()
    assert [(p.seed, p.logprobs) for p in plain] == [(None, 4)] * 3
    assert SamplingParams().sample_params() == [SamplingParams()]


def test_batch_refuses_a_request_that_is_not_fanned_out():
    with pytest.raises(InvalidParameterError, match=r"rows \[1\].*SamplingParams.sample_params"):
        SamplingBatch.build([SamplingParams(), SamplingParams(n=2)], vocab_size=10)
    batch = SamplingBatch.build(SamplingParams(n=2, seed=5).sample_params(), vocab_size=10)
    assert batch.seeds.tolist() == [5, 6]
