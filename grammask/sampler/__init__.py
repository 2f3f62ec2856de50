"""Sampling parameters, their batched form, penalties, logits processors, the sampler and stop conditions."""

from grammask.sampler.batch import SamplingBatch
from grammask.sampler.params import GREEDY_EPS, ProcessorSpec, SamplingParams
from grammask.sampler.processors import ProcessorContext, create_processor, register_processor, registered_processors
from grammask.sampler.sampler import NO_TOKEN, LogprobsMode, Sampler, SamplerOutput

__all__ = [
    "GREEDY_EPS",
    "NO_TOKEN",
    "LogprobsMode",
    "ProcessorContext",
    "ProcessorSpec",
    "Sampler",
    "SamplerOutput",
    "SamplingBatch",
    "SamplingParams",
    "create_processor",
    "register_processor",
    "registered_processors",
]
