"""``x @ weight.T`` for a denoising pass's few rows: the Triton thin kernel (a candidate) or ``F.linear``.

The Triton path takes activations of at most ``MAX_ROWS`` rows (a block); longer ones (a prompt) and the
torch path go to ``F.linear``, whose cuBLAS kernels are the reference and the default.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import kernel_path

MAX_ROWS = 16


def linear(x: torch.Tensor, weight: torch.Tensor, *, path: str = "auto", **launch: int) -> torch.Tensor:
    """``x [..., K] @ weight [N, K]^T``; ``launch``: the thin kernel's tile and split parameters
    (``block_n``, ``block_k``, ``split_k``, ``num_stages``, ``num_warps``), for the GPU check's sweep."""
    if x.shape[-1] != weight.shape[-1] or weight.dim() != 2 or x.dtype != weight.dtype:
        raise ValueError(f"linear: x {tuple(x.shape)} {x.dtype} and weight {tuple(weight.shape)} {weight.dtype}")
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] > MAX_ROWS or kernel_path(path, x.device) == "torch":
        return F.linear(x, weight)
    from kernels import thin_linear_triton

    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = rows.new_empty(rows.shape[0], weight.shape[0])
    thin_linear_triton.thin_linear(rows, weight if weight.stride(-1) == 1 else weight.contiguous(), out, **launch)
    return out.view(*x.shape[:-1], weight.shape[0])
