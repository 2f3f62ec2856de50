"""grammask: constrained decoding for language models.

Specs (JSON Schema, regex, EBNF, structural tags) compile into per-request matchers; each step the
matchers fill a packed int32 bitmask over the vocabulary, :func:`~grammask.kernels.apply_mask.apply_mask` applies it to the
logits, and the batched sampler picks the next tokens.

Names are imported on first use (``import grammask`` loads neither torch nor jsonschema), so the
command line starts fast; ``from grammask import X`` and ``grammask.X`` work as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grammask._lazy import lazy_exports
from grammask.errors import (
    CompileLimitError,
    GrammaskError,
    InvalidGrammarError,
    InvalidOutputError,
    InvalidParameterError,
    InvalidRegexError,
    InvalidSchemaError,
    TokenizerError,
    UnsupportedFeatureError,
)

__version__ = "0.1.0"

_EXPORTS = {
    **dict.fromkeys(
        ["CompiledGrammar", "Ebnf", "GrammarCompiler", "JsonSchema", "Matcher", "NumberForm", "PropertyOrder", "Reasoning",
         "Regex", "StructuralTag", "Tag", "Unenforced", "Whitespace"],
        "grammask.grammars",
    ),
    **dict.fromkeys(
        ["GenerationResult", "GenerationTimings", "generate_json", "generate_json_batch", "generate_structured"],
        "grammask.generate",
    ),
    "GrammaskLogitsProcessor": "grammask.integrations.transformers",
    "apply_mask": "grammask.kernels",
    **dict.fromkeys(
        ["allocate_token_bitmask", "bitmask_to_bool", "bool_to_bitmask", "fill_draft_bitmask",
         "fill_next_token_bitmask", "reset_token_bitmask"],
        "grammask.masking",
    ),
    **dict.fromkeys(
        ["FinishReason", "NO_TOKEN", "Sampler", "SamplerOutput", "SamplingBatch", "SamplingParams", "StopChecker",
         "register_processor", "rejection_sample"],
        "grammask.sampler",
    ),
    **dict.fromkeys(["TokenizerInfo", "VocabType"], "grammask.tokenizer"),
    "spec_from_request": "grammask.openai",
    **dict.fromkeys(["TOOL_CALL_FORMATS", "Tool", "tool_call_spec"], "grammask.tool_calls"),
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from grammask.generate import (
        GenerationResult,
        GenerationTimings,
        generate_json,
        generate_json_batch,
        generate_structured,
    )
    from grammask.grammars import (
        CompiledGrammar,
        Ebnf,
        GrammarCompiler,
        JsonSchema,
        Matcher,
        NumberForm,
        PropertyOrder,
        Reasoning,
        Regex,
        StructuralTag,
        Tag,
        Unenforced,
        Whitespace,
    )
    from grammask.integrations.transformers import GrammaskLogitsProcessor
    from grammask.kernels import apply_mask
    from grammask.masking import (
        allocate_token_bitmask,
        bitmask_to_bool,
        bool_to_bitmask,
        fill_draft_bitmask,
        fill_next_token_bitmask,
        reset_token_bitmask,
    )
    from grammask.sampler import (
        NO_TOKEN,
        FinishReason,
        Sampler,
        SamplerOutput,
        SamplingBatch,
        SamplingParams,
        StopChecker,
        register_processor,
        rejection_sample,
    )
    from grammask.openai import spec_from_request
    from grammask.tokenizer import TokenizerInfo, VocabType
    from grammask.tool_calls import TOOL_CALL_FORMATS, Tool, tool_call_spec

__all__ = [
    "CompileLimitError",
    "CompiledGrammar",
    "Ebnf",
    "FinishReason",
    "GenerationResult",
    "GenerationTimings",
    "GrammarCompiler",
    "GrammaskError",
    "GrammaskLogitsProcessor",
    "InvalidGrammarError",
    "InvalidOutputError",
    "InvalidParameterError",
    "InvalidRegexError",
    "InvalidSchemaError",
    "JsonSchema",
    "Matcher",
    "NO_TOKEN",
    "NumberForm",
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
    "fill_draft_bitmask",
    "fill_next_token_bitmask",
    "generate_json",
    "generate_json_batch",
    "generate_structured",
    "register_processor",
    "rejection_sample",
    "reset_token_bitmask",
    "spec_from_request",
    "tool_call_spec",
]
