"""Run the Triton kernels in the CPU interpreter.

Triton decides interpreter vs compiled when a kernel is *defined* (``@triton.jit`` reads
``TRITON_INTERPRET``), not at launch. The kernel modules (``kernels.*_triton``) are imported
lazily, on the first Triton-path call, so setting the variable here, before any test in this
directory runs, is enough even when other test modules imported torch or triton earlier.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
