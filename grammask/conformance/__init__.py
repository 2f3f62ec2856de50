"""Conformance: schema corpora through grammask's backends and peer libraries, and the report."""

PEER_MODULES = {"xgrammar": "xgrammar", "llguidance": "llguidance", "outlines-core": "outlines_core"}
"""The peers by name, and the module each needs (a missing one means the peer is skipped with a note)."""
