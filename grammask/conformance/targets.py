"""What a worker process runs: one schema through one target (a grammask backend, a peer, or the
``jsonschema`` reference), giving a compile outcome and a verdict per instance.

Target names: ``"grammask:<backend>"`` (``auto``, ``xgrammar``, ``fsm``, ...), ``"peer:<name>"``
(``xgrammar``, ``llguidance``, ``outlines-core``, or ``module:Class``) and ``"jsonschema"``.

Verdict views per instance (the serialisation policy, see ``docs/conformance.md``):

- ``given``: compact JSON, keys in the corpus's order, spec with the default DECLARED property order;
- ``declared``: the same instance with keys reordered into the schema's declared order;
- ``any``: keys as given, spec compiled with ``property_order="any"`` (targets that have the option).
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable

from grammask.conformance.corpus import declared_order
from grammask.errors import CompileLimitError, InvalidSchemaError, UnsupportedFeatureError
from grammask.grammars.spec import JsonSchema

REFERENCE = "jsonschema"
VIEWS = ("given", "declared", "any")


class WorkerContext:
    """Per-process state, built lazily once: the tokenizer, compilers, peers."""

    def __init__(self) -> None:
        self._info: Any = None
        self._hf: Any = None
        self._compilers: dict[str, Any] = {}
        self._peers: dict[str, Any] = {}
        # Called with a short phase name ("walking instances") so a timeout can say where it hung.
        self.phase_hook: Callable[[str], None] = lambda phase: None

    def warm_up(self, targets: list[str]) -> None:
        """Load what ``targets`` need (outside any task's time limit): the tokenizers, the peers, and
        the libraries grammask imports on first use (jsonschema, seconds with its format checkers,
        for the reference and every schema check; torch with the compiler)."""
        import jsonschema  # noqa: F401

        for target in targets:
            if target != REFERENCE:
                self.info()
                self.hf()
            if target.startswith("grammask:"):
                self._compiler(target.split(":", 1)[1])
            if target.startswith("peer:"):
                self._peer(target[5:])

    def info(self) -> Any:
        if self._info is None:
            from grammask import bundled

            self._info = bundled.llama32_tokenizer_info()
        return self._info

    def hf(self) -> Any:
        if self._hf is None:
            from grammask import bundled

            self._hf = bundled.llama32_hf_tokenizer()
        return self._hf

    def _compiler(self, backend: str) -> Any:
        if backend not in self._compilers:
            from grammask.grammars.compiler import GrammarCompiler

            self._compilers[backend] = GrammarCompiler(self.info(), backend=backend, cache_size=4)
        return self._compilers[backend]

    def _peer(self, name: str) -> Any:
        if name not in self._peers:
            from grammask.conformance.peers import load_peer

            self._peers[name] = load_peer(name, self.info())
        return self._peers[name]

    def run(self, target: str, schema: Any, instances: list[Any], format_asserted: bool, any_order: bool = False) -> dict:
        """Compile ``schema`` with ``target`` and give its verdict on every instance (a JSON-able dict)."""
        if target == REFERENCE:
            return _reference(schema, instances, format_asserted)
        if target.startswith("grammask:"):
            return self._run_grammar(target[9:], schema, instances, format_asserted, any_order)
        if target.startswith("peer:"):
            return self._run_peer(target[5:], schema, instances, any_order)
        raise ValueError(f"unknown target {target!r}")

    def _run_grammar(self, backend: str, schema: Any, instances: list[Any], format_asserted: bool, any_order: bool) -> dict:
        """grammask's own backends follow the corpus's format rule (``assert_formats``); peers have no such option."""
        compiler = self._compiler(backend)
        start = time.perf_counter()
        try:
            compiled = compiler.compile(JsonSchema(schema, assert_formats=format_asserted))
        except Exception as exc:  # every failure is an outcome, never a stopped run
            return _failure(exc, time.perf_counter() - start)
        self.phase_hook("walking instances")
        result = {
            "outcome": "ok",
            "compile_seconds": time.perf_counter() - start,
            "unenforced": [str(u) for u in compiled.unenforced],
            "unenforced_keywords": sorted({u.keyword for u in compiled.unenforced}),
            "narrowed": [str(u) for u in compiled.narrowed],
            "narrowed_keywords": sorted({u.keyword for u in compiled.narrowed}),
            "choice": compiled.choice,
            "backend": compiled.backend,
        }
        any_factory: Callable[[], Any] | None = None
        try:
            if any_order:
                any_factory = compiler.compile(JsonSchema(schema, property_order="any", assert_formats=format_asserted)).matcher
        except Exception as exc:
            result["any_error"] = _one_line(exc)
        reorder = _fsm_order if compiled.backend == "fsm" else declared_order
        matchers: list[Any] = []

        def new_matcher() -> Any:
            matchers.append(compiled.matcher())
            return matchers[-1]

        result.update(self._verdicts(new_matcher, any_factory, schema, instances, reorder))
        _account_for_moves(result, matchers)
        return result

    def _run_peer(self, name: str, schema: Any, instances: list[Any], any_order: bool) -> dict:
        peer = self._peer(name)
        start = time.perf_counter()
        try:
            factory = peer.compile(JsonSchema(schema))
        except Exception as exc:
            return _failure(exc, time.perf_counter() - start, peer=True)
        self.phase_hook("walking instances")
        result = {"outcome": "ok", "compile_seconds": time.perf_counter() - start, "unenforced": [], "narrowed": []}
        any_factory = None
        if any_order and getattr(peer, "supports_any_order", False):
            try:
                any_factory = peer.compile(JsonSchema(schema, property_order="any"))
            except Exception as exc:
                result["any_error"] = _one_line(exc)
        result.update(self._verdicts(factory, any_factory, schema, instances))
        return result

    def _verdicts(
        self,
        factory: Callable[[], Any],
        any_factory: Callable[[], Any] | None,
        schema: Any,
        instances: list[Any],
        reorder: Callable[[Any, Any], Any] = declared_order,
    ) -> dict:
        """Verdicts in each view; ``reorder(instance, schema)`` writes an instance in the target's
        documented key order (the "declared" view)."""
        spec = JsonSchema(True)  # compact serialisation; the same for every target
        views: dict[str, list] = {v: [] for v in VIEWS}
        stops: list[str] = []
        for data in instances:
            given = spec.serialize(data)
            accepted, stop = self._walk(factory, given)
            views["given"].append(accepted)
            stops.append(stop)
            reordered = spec.serialize(reorder(data, schema))
            views["declared"].append(accepted if reordered == given else self._walk(factory, reordered)[0])
            views["any"].append(None if any_factory is None else self._walk(any_factory, given)[0])
        return {"verdicts": views, "stops": stops}

    def _walk(self, factory: Callable[[], Any], text: str) -> tuple[bool | None, str]:
        """Force ``text``'s Llama-3.2 tokens then EOS through a fresh matcher.

        Returns (accepted, where it stopped: ``""`` when accepted, else the text up to the rejected token).
        """
        ids = self.hf().encode(text, add_special_tokens=False)
        matcher = factory()
        try:
            for step, token in enumerate(ids):
                if not matcher.accept_token(token):
                    prefix = self.hf().decode(ids[:step])
                    return False, f"token {step} {self.hf().decode([token])!r} after {prefix[-40:]!r}"
            if not matcher.accept_token(self.info().eos_ids[0]):
                return False, "EOS refused at the end"
        except Exception as exc:
            return None, f"matcher error: {_one_line(exc)}"
        return True, ""


def _account_for_moves(result: dict, matchers: list[Any]) -> None:
    """When a walk moved to the fallback backend mid-instance (auto), that grammar's verdicts are in
    the counts, so its unenforced and narrowed keywords join the result's: a false accept there is
    not one of an exact grammar."""
    moved = [m for m in matchers if getattr(m, "fell_back", None)]
    if not moved:
        return
    used = moved[0].grammar
    result["moved"] = moved[0].fell_back
    result["unenforced"] = sorted(set(result["unenforced"]) | {str(u) for u in used.unenforced})
    result["unenforced_keywords"] = sorted(set(result["unenforced_keywords"]) | {u.keyword for u in used.unenforced})
    result["narrowed"] = sorted(set(result["narrowed"]) | {str(u) for u in used.narrowed})
    result["narrowed_keywords"] = sorted(set(result["narrowed_keywords"]) | {u.keyword for u in used.narrowed})


def _fsm_order(instance: Any, schema: Any) -> Any:
    """The fsm backend's DECLARED policy: one global ranking of the document's property names."""
    from grammask.grammars.fsm.json_schema import order_instance

    return order_instance(JsonSchema(schema), instance)


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:300]


def _failure(exc: BaseException, seconds: float, peer: bool = False) -> dict:
    result: dict[str, Any] = {"compile_seconds": seconds, "detail": _one_line(exc)}
    if isinstance(exc, UnsupportedFeatureError):
        result.update(outcome="unsupported", keyword=exc.feature, path=exc.path)
    elif isinstance(exc, InvalidSchemaError):
        result.update(outcome="invalid", path=exc.pointer)
    elif isinstance(exc, CompileLimitError):
        result.update(outcome="limit", keyword=exc.limit)
    elif isinstance(exc, MemoryError):
        result.update(outcome="oom")
    elif peer:
        result.update(outcome="unsupported")  # a peer refusing a schema is its way of not covering it
    else:
        result.update(outcome="error", traceback=traceback.format_exc(limit=-4)[-1200:])
    return result


def _reference(schema: Any, instances: list[Any], format_asserted: bool) -> dict:
    """Python ``jsonschema`` with the schema's declared draft, formats asserted when the labels assert them."""
    import jsonschema
    import jsonschema.validators

    start = time.perf_counter()
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        checker = jsonschema.FormatChecker() if format_asserted else None
        validator = cls(schema, format_checker=checker)
    except Exception as exc:
        return _failure(exc, time.perf_counter() - start)
    verdicts: list[bool | None] = []
    reasons: list[str] = []
    for data in instances:
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        except Exception as exc:  # unresolvable $ref, bad regex
            verdicts.append(None)
            reasons.append(_one_line(exc))
            continue
        verdicts.append(error is None)
        reasons.append("" if error is None else f"{error.message[:160]} at '/{'/'.join(map(str, error.absolute_path))}'")
    return {
        "outcome": "ok",
        "compile_seconds": time.perf_counter() - start,
        "draft": cls.__name__,
        "verdicts": {"given": verdicts},
        "reasons": reasons,
    }
