"""grammask: constrained decoding for language models.

Specs (JSON Schema, regex, EBNF, structural tags) compile into per-request matchers; each step the
matchers fill a packed int32 bitmask over the vocabulary, :func:`apply_mask` applies it to the
logits, and the batched sampler picks the next tokens.
"""

from grammask.errors import (
    CompileLimitError,
    GrammaskError,
    InvalidOutputError,
    InvalidGrammarError,
    InvalidParameterError,
    InvalidRegexError,
    InvalidSchemaError,
    TokenizerError,
    UnsupportedFeatureError,
)
from grammask.grammars import (
    CompiledGrammar,
    Ebnf,
    GrammarCompiler,
    JsonSchema,
    Matcher,
    PropertyOrder,
    Reasoning,
    Regex,
    StructuralTag,
    Tag,
    Unenforced,
    Whitespace,
)
from grammask.generate import GenerationResult, GenerationTimings, generate_json, generate_json_batch
from grammask.kernels import apply_mask
from grammask.masking import (
    allocate_token_bitmask,
    bitmask_to_bool,
    bool_to_bitmask,
    fill_next_token_bitmask,
    reset_token_bitmask,
)
from grammask.sampler import (
    FinishReason,
    Sampler,
    SamplerOutput,
    SamplingBatch,
    SamplingParams,
    StopChecker,
    register_processor,
)
from grammask.tokenizer import TokenizerInfo, VocabType
from grammask.openai import spec_from_request
from grammask.tool_calls import TOOL_CALL_FORMATS, Tool, tool_call_spec

__version__ = "0.1.0"

__all__ = [
    "CompileLimitError",
    "CompiledGrammar",
    "Ebnf",
    "FinishReason",
    "GenerationResult",
    "GenerationTimings",
    "GrammarCompiler",
    "GrammaskError",
    "InvalidGrammarError",
    "InvalidOutputError",
    "InvalidParameterError",
    "InvalidRegexError",
    "InvalidSchemaError",
    "JsonSchema",
    "Matcher",
    "PropertyOrder",
    "Reasoning",
    "Regex",
    "Sampler",
    "SamplerOutput",
    "SamplingBatch",
    "SamplingParams",
    "StopChecker",
    "StructuralTag",
    "Tag",
    "TOOL_CALL_FORMATS",
    "TokenizerError",
    "TokenizerInfo",
    "Tool",
    "Unenforced",
    "UnsupportedFeatureError",
    "VocabType",
    "Whitespace",
    "allocate_token_bitmask",
    "apply_mask",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "fill_next_token_bitmask",
    "generate_json",
    "generate_json_batch",
    "register_processor",
    "reset_token_bitmask",
    "spec_from_request",
    "tool_call_spec",
]
