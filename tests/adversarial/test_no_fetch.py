"""Compiling, generating and validating open no socket and no file but the ones the caller named
(issue #12), proven with an audit hook (``sys.addaudithook``) over hostile schemas and a whole
``generate_json`` run of a tiny random model."""

from __future__ import annotations

import json
import sys
import threading

import pytest

import grammask as gm
from grammask import bundled
from grammask.validation import output_errors
from tests.tiny_models import tiny_llama

NETWORK_EVENTS = ("socket.", "urllib.Request", "http.client.", "ftplib.", "smtplib.", "webbrowser.")
PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")  # a lazy import reads module code: not data


class AuditLog:
    """What the process tried while armed. A hook cannot be removed, so it stays and only records when armed."""

    def __init__(self) -> None:
        self.armed = False
        self.allowed: set[str] = set()
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def hook(self, event: str, args: tuple) -> None:
        if not self.armed:
            return
        if event.startswith(NETWORK_EVENTS + PROCESS_EVENTS):
            self._record(event, args)
        elif event == "open":
            path = args[0]
            if isinstance(path, int):  # a file descriptor already open
                return
            path = str(path)
            if path not in self.allowed and not path.endswith(CODE_SUFFIXES):
                self._record(event, args)

    def _record(self, event: str, args: tuple) -> None:
        with self._lock:
            self.events.append((event, repr(args)[:200]))


_LOG = AuditLog()
sys.addaudithook(_LOG.hook)


@pytest.fixture()
def audit():
    _LOG.events.clear()
    _LOG.allowed.clear()
    _LOG.armed = True
    try:
        yield _LOG
    finally:
        _LOG.armed = False


def test_the_hook_sees_what_it_must_refuse(audit, tmp_path):
    """The watcher itself: a fetch and a file read are recorded."""
    import socket
    import urllib.request

    (tmp_path / "x.txt").write_text("x")
    audit.events.clear()
    open(tmp_path / "x.txt").close()
    try:
        urllib.request.urlopen("file:///etc/hostname").close()
    except OSError:
        pass
    with socket.socket() as sock:
        sock.settimeout(0.01)
        try:
            sock.connect(("127.0.0.1", 9))
        except OSError:
            pass
    kinds = {event for event, _ in audit.events}
    assert {"open", "urllib.Request", "socket.connect"} <= kinds


HOSTILE = [
    {"$ref": "http://127.0.0.1:9/schema.json"},
    {"$ref": "file:///etc/passwd"},
    {"$id": "file:///etc/", "$ref": "passwd"},
    {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json#/x"}}},
    {"$schema": "file:///etc/passwd", "type": "string"},
    {"$defs": {"a": {"$dynamicRef": "http://127.0.0.1:9/d#x"}}, "$ref": "#/$defs/a"},
]
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": r"^\p{L}{1,8}$"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "patternProperties": {"^x-": {"type": "integer"}},
    "additionalProperties": False,
    "required": ["name"],
}


@pytest.fixture(scope="module")
def llama_model():
    return tiny_llama()


@pytest.mark.parametrize("backend", ["auto", "fsm", "xgrammar"])
def test_compiling_hostile_schemas_opens_nothing(audit, llama_info, backend):
    compiler = gm.GrammarCompiler(llama_info, backend=backend)
    compiler.compile(gm.JsonSchema({"type": "string"}))  # lazy imports happen outside the check
    audit.events.clear()
    for schema in HOSTILE:
        try:
            compiler.compile(gm.JsonSchema(schema))
        except gm.GrammaskError:
            pass
    assert audit.events == []


META_REFERENCE = {"properties": {"meta": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}


def test_validating_hostile_schemas_opens_nothing(audit):
    assert output_errors(META_REFERENCE, {"meta": {"type": 5}})  # judged from jsonschema's bundled copy
    for schema in HOSTILE + [OUTPUT_SCHEMA, META_REFERENCE]:
        for value in ["x", {"a": 1}, {"name": "Ünï", "meta": {"type": "string"}, "x-1": 2}, {"meta": {"$ref": "file:///etc/passwd"}}]:
            try:
                output_errors(schema, value)
            except gm.GrammaskError:
                pass
    assert audit.events == []


def test_generate_json_opens_only_the_schema_file_it_was_given(audit, tmp_path, llama_model, llama_hf, llama_info):
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(OUTPUT_SCHEMA))
    compiler = gm.GrammarCompiler(llama_info)
    audit.armed = False  # a first run warms the lazy imports and tables
    gm.generate_json({"type": "string"}, llama_model, llama_hf, max_new_tokens=4, compiler=compiler)
    audit.events.clear()
    audit.allowed.add(str(schema_file))
    audit.armed = True
    result = gm.generate_json(str(schema_file), llama_model, llama_hf, max_new_tokens=20, compiler=compiler,
                              sampling=gm.SamplingParams(temperature=1.0, seed=3))
    for schema in HOSTILE:
        try:
            gm.generate_json(schema, llama_model, llama_hf, max_new_tokens=8, compiler=compiler)
        except gm.GrammaskError:
            pass  # refused at compile time; an unknown "$schema" is only a name, read as 2020-12
    assert audit.events == []
    assert result.finish_reason in ("stop", "length")
    # The grammar enforces \p{L} and the patterns; all it lists is what xgrammar would lose were the
    # request to move there mid-way.
    assert result.backend == "fsm" and all(u.reason.startswith("after a mid-request move") for u in result.unenforced)
    if result.finish_reason == "stop":
        assert result.valid, result.errors
