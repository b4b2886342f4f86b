"""Device-side helpers for programmatic dependent launch (see ``kernels.pdl``; imported only on the Triton path)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

L2_LINE_BYTES = 128


def line_elements(t: torch.Tensor) -> int:
    """How many of ``t``'s elements one L2 line holds: the stride between the pointers a prefetch asks for."""
    return max(1, L2_LINE_BYTES // t.element_size())


@triton.jit
def wait_for_previous_kernel(GDC: tl.constexpr):
    """With ``GDC``: wait until the kernel before has finished and its writes are visible, then let the next
    kernel start. Called before a kernel's first access to memory another kernel of the pass writes or reads.
    Without it (a plain launch, and always in the interpreter) there is nothing to wait for."""
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (a pointer into each line) without waiting for them: reads that can
    start while the kernel before is still running. Compiled code only (inline PTX)."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )
