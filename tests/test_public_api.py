"""The top-level package: every re-exported name resolves, the lazy table and the names type
checkers see agree, and ``import grammask`` loads neither torch nor jsonschema."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _type_checking_names(path: Path) -> set[str]:
    """Names imported under ``if TYPE_CHECKING:`` in ``path``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                names |= {alias.asname or alias.name for alias in getattr(statement, "names", [])}
    return names


@pytest.mark.parametrize("package", ["grammask", "grammask.grammars"])
def test_every_exported_name_resolves_and_type_checkers_see_the_same(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        defined_in = getattr(value, "__module__", None)
        assert defined_in is None or defined_in.startswith("grammask") or name == "Spec", (name, defined_in)
    path = ROOT / Path(*package.split(".")) / "__init__.py"
    assert _type_checking_names(path) == set(module._EXPORTS)
    assert set(module._EXPORTS) <= set(module.__all__) and set(module.__all__) <= set(dir(module))


def test_an_unknown_name_is_an_attribute_error():
    import grammask

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        grammask.no_such_name  # noqa: B018


def test_import_loads_neither_torch_nor_jsonschema():
    code = "import sys, grammask, grammask.grammars; print(sorted({'torch', 'jsonschema'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
