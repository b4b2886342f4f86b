"""Run the Triton kernels in the CPU interpreter.

Triton decides interpreter vs compiled mode when a function is decorated, and that includes its
own ``triton.language`` library, so ``TRITON_INTERPRET`` must be set before triton is first
imported. This conftest is enough when nothing imported triton during collection of earlier test
directories (``torch._dynamo`` / ``torch.compile`` do); otherwise ``kernels.dispatch`` fails with
a message saying so, and the variable belongs at the top of ``tests/conftest.py``.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
