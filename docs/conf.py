"""Sphinx configuration of grammask's API reference.

Build (the tests run the same command; -W -n make any warning, a broken reference included, an error):

    python -m sphinx -W -n -q -b html docs build/docs
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, whatever copy of grammask is installed

import grammask  # noqa: E402

project = "grammask"
release = version = grammask.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"grammask {release}"

# Docstrings are Google style (Args:, Returns:, Raises:, Attributes:) with reST roles inside.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_preserve_defaults = True

# Every reference must resolve (-n), except to libraries whose inventories are not fetched
# (the build runs offline): their names are left as plain text.
nitpicky = True
_OTHER_LIBRARIES = "torch|np|numpy|transformers|jsonschema|xgrammar|xgr|llguidance|outlines_core|pydantic|regex|tokenizers"
_STANDARD_LIBRARY = "_thread|abc|argparse|collections|concurrent|dataclasses|decimal|enum|os|pathlib|re|threading|types|typing"
nitpick_ignore_regex = [
    (r"py:.*", rf"({_OTHER_LIBRARIES}|{_STANDARD_LIBRARY})(\..*)?"),
    (r"py:.*", r"(Tensor|LongTensor|FloatTensor|ndarray|Validator|LogitsProcessor|Path|TextIO|Callable|Any|Sequence)"),
    (r"py:class", r"(.*\.)?_\w+"),  # private base classes shown by show-inheritance
    (r"py:class", r".*\.[A-Z]"),  # type variables
    (r"py:class", r"grammask\.grammars\.fsm\.(?!backend\.).*"),  # the automaton's internals are not documented
    (r"py:class", r"tuple\[.*"),  # Sphinx splits ``tuple[X, ...]`` return annotations at the comma
]
myst_heading_anchors = 3


def _resolve_short_name(app, env, node, contnode):
    """Docstrings name objects as a reader would: ``InvalidParameterError``, ``SamplingBatch.merge``,
    or by the package that re-exports them (``grammask.sampler.Sampler``). A Python reference that did
    not resolve as written resolves to the one documented object whose full name ends with it, or
    that lives under the named package with the same last name; none or several stay unresolved, so
    the strict build fails on them."""
    if node.get("refdomain") != "py":
        return None
    from sphinx.util.nodes import make_refnode

    target = node["reftarget"].lstrip(".~")
    package, _, last = target.rpartition(".")
    objects = env.get_domain("py").objects

    def matches(name: str) -> bool:
        return name.endswith("." + target) or bool(package) and name.startswith(package + ".") and name.endswith("." + last)

    found = {name for name, entry in objects.items() if matches(name) and not entry.aliased}
    if len(found) != 1:
        return None
    name = found.pop()
    entry = objects[name]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)


def setup(app):
    app.connect("missing-reference", _resolve_short_name)
