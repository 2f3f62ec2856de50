"""Kernel tests run the Triton kernels on CPU tensors through the Triton interpreter.

``TRITON_INTERPRET=1`` must be in the environment before a ``@triton.jit`` kernel is defined, i.e. before
``grammask.kernels.apply_mask_triton`` (or any other kernel module) is first imported; this conftest is
loaded before the test modules of this folder. ``setdefault`` lets a run override it: with
``TRITON_INTERPRET=0`` the tests that run a Triton kernel on CPU tensors skip, and ``tests/gpu`` runs the
kernels on CUDA.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
