"""Build script for grammask's native extension (metadata lives in pyproject.toml).

The fsm backend's token walks (``grammask/grammars/fsm/_walk.c``) and its expression nodes
(``grammask/grammars/fsm/_expr.c``) run in C: plain C against the Python API, no other headers.
The build is optional: without a compiler, the pure-Python reference implementations in
``grammask/grammars/fsm/walk.py`` and ``expr.py`` are used (slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "grammask.grammars.fsm._walk",
            ["grammask/grammars/fsm/_walk.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "grammask.grammars.fsm._expr",
            ["grammask/grammars/fsm/_expr.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
