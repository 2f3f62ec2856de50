"""The errors grammask raises.

Every error derives from :class:`GrammaskError` and says what is wrong and where:
a bad schema names the JSON pointer of the offending place, an unsupported feature
names the keyword or construct, its path and the backend, a bad regex or grammar
names the position, and a compile that exceeds a limit names the limit.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable


class GrammaskError(Exception):
    """Base class of every error grammask raises on purpose."""


class InvalidSchemaError(GrammaskError, ValueError):
    """A JSON Schema is malformed (fails its meta-schema, or a ``$ref`` does not resolve).

    Attributes:
        pointer: JSON pointer (RFC 6901) of the offending place in the schema, ``""`` for the root.
        reason: what is wrong there.
    """

    def __init__(self, reason: str, pointer: str = "") -> None:
        self.reason = reason
        self.pointer = pointer
        super().__init__(f"invalid JSON Schema at '{pointer or '/'}': {reason}")


class UnsupportedFeatureError(GrammaskError, NotImplementedError):
    """A backend cannot enforce a keyword or construct of a spec.

    Attributes:
        feature: the keyword (``"uniqueItems"``) or construct (``"lookahead"``).
        path: JSON pointer for schemas, character offset (as ``"@12"``) for regexes.
        backend: the name of the backend that refused.
    """

    def __init__(self, feature: str, path: str, backend: str, detail: str = "") -> None:
        self.feature = feature
        self.path = path
        self.backend = backend
        self.detail = detail
        where = path or "/"
        suffix = f": {detail}" if detail else ""
        super().__init__(f"backend '{backend}' cannot enforce '{feature}' at '{where}'{suffix}")


class InvalidRegexError(GrammaskError, ValueError):
    """A regular expression does not parse.

    Attributes:
        pattern: the regex.
        position: 0-based character offset of the error, or ``None`` when unknown.
    """

    def __init__(self, reason: str, pattern: str, position: int | None = None) -> None:
        self.reason = reason
        self.pattern = pattern
        self.position = position
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"invalid regex{where}: {reason} (pattern {pattern!r})")


class InvalidGrammarError(GrammaskError, ValueError):
    """An EBNF grammar or structural tag does not parse.

    Attributes:
        line, column: 1-based position of the error when known.
    """

    def __init__(self, reason: str, line: int | None = None, column: int | None = None) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"invalid grammar{where}: {reason}")


class CompileLimitError(GrammaskError, RuntimeError):
    """Compiling a spec exceeded one of its limits.

    Attributes:
        limit: which limit (``"max_states"``, ``"compile_seconds"``, ``"memory_bytes"``,
            ``"expression_bytes"``, ``"max_depth"``, ``"max_nesting"``, ``"max_repeat"``, ``"max_stacks"``...).
        value: the value reached when the compile stopped.
        cap: the configured cap.
    """

    def __init__(self, limit: str, value: Any, cap: Any, detail: str = "") -> None:
        self.limit = limit
        self.value = value
        self.cap = cap
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"compile limit '{limit}' exceeded: reached {value}, cap is {cap}{suffix}")


class InvalidParameterError(GrammaskError, ValueError):
    """A parameter has an out-of-range or contradictory value.

    Attributes:
        field: the parameter's name.
        value: the value given.
        allowed: what is allowed, in words.
    """

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {field}={value!r}: expected {allowed}")

    @classmethod
    def unknown_name(cls, field: str, value: Any, names: Iterable[str]) -> "InvalidParameterError":
        """The error for a name that is not one of ``names``, suggesting the closest one (a typo)."""
        names = sorted(names)
        close = difflib.get_close_matches(str(value), names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return cls(field, value, f"one of {', '.join(map(repr, names))}{hint}")


class TokenizerError(GrammaskError, ValueError):
    """A tokenizer cannot be turned into a :class:`~grammask.tokenizer.TokenizerInfo`."""


class InvalidOutputError(GrammaskError, ValueError):
    """A generated output does not validate against its schema.

    Attributes:
        text: the generated text.
        reason: why it is invalid (a JSON parse error or the first validation error).
        finish_reason: why generation stopped (``"length"`` for a cut-off output).
    """

    def __init__(self, text: str, reason: str, finish_reason: str | None = None) -> None:
        self.text = text
        self.reason = reason
        self.finish_reason = finish_reason
        fin = f" (finish_reason={finish_reason!r})" if finish_reason else ""
        super().__init__(f"generated output is not valid{fin}: {reason}")
