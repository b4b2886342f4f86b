"""``x @ weight.T`` for a denoising pass's few rows: the Triton thin kernel (a candidate) or ``F.linear``.

``gated``: ``x`` is a fused gate/up projection and the product's input is SwiGLU's activation of it, which
the thin kernel forms as it reads (a down projection without the ``silu_mul`` launch before it).

The Triton path takes activations of at most ``MAX_ROWS`` rows (a block); longer ones (a prompt) and the
torch path go to ``F.linear``, whose cuBLAS kernels are the reference and the default.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import kernel_path
from kernels.fused import silu_mul

MAX_ROWS = 16


def linear(x: torch.Tensor, weight: torch.Tensor, *, path: str = "auto", gated: bool = False,
           **launch: int) -> torch.Tensor:  # fmt: skip
    """``x [..., K] @ weight [N, K]^T`` (``gated``: ``silu_mul(x [..., 2K]) @ weight^T``); ``launch``: the thin
    kernel's tile and split parameters (``block_n``, ``block_k``, ``split_k``, ``num_stages``, ``num_warps``), for
    the GPU check's sweep."""
    if x.shape[-1] != weight.shape[-1] * (2 if gated else 1) or weight.dim() != 2 or x.dtype != weight.dtype:
        raise ValueError(f"linear: x {tuple(x.shape)} {x.dtype} and weight {tuple(weight.shape)} {weight.dtype}"
                         + (" (gated: x is gate then up, twice the weight's width)" if gated else ""))  # fmt: skip
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] > MAX_ROWS or kernel_path(path, x.device) == "torch":
        return F.linear(silu_mul(x, path=path) if gated else x, weight)
    from kernels import thin_linear_triton

    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = rows.new_empty(rows.shape[0], weight.shape[0])
    thin_linear_triton.thin_linear(rows, weight if weight.stride(-1) == 1 else weight.contiguous(), out,
                                   gated=gated, **launch)  # fmt: skip
    return out.view(*x.shape[:-1], weight.shape[0])
