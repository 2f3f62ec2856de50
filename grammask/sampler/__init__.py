"""Sampling parameters, their batched form, penalties, logits processors, the sampler and stop conditions."""

from grammask.sampler.batch import SamplingBatch
from grammask.sampler.params import GREEDY_EPS, LogprobsMode, ProcessorSpec, SamplingParams
from grammask.sampler.processors import ProcessorContext, create_processor, register_processor, registered_processors
from grammask.sampler.sampler import NO_TOKEN, Sampler, SamplerOutput, prompt_logprobs
from grammask.sampler.spec_decode import RejectionOutput, rejection_sample
from grammask.sampler.stop import Finish, FinishReason, IncrementalDetokenizer, StopChecker

__all__ = [
    "GREEDY_EPS",
    "Finish",
    "FinishReason",
    "IncrementalDetokenizer",
    "StopChecker",
    "NO_TOKEN",
    "LogprobsMode",
    "ProcessorContext",
    "ProcessorSpec",
    "RejectionOutput",
    "Sampler",
    "SamplerOutput",
    "SamplingBatch",
    "SamplingParams",
    "create_processor",
    "prompt_logprobs",
    "rejection_sample",
    "register_processor",
    "registered_processors",
]
