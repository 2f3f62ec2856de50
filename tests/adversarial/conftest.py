"""Adversarial tests: what an attacker or a careless caller feeds grammask (issue #12).

The Triton kernels run on CPU tensors through the interpreter here too; ``TRITON_INTERPRET=1`` must be
set before triton is first imported (``setdefault`` lets a GPU run override it).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
