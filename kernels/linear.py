"""``x @ weight.T`` for a denoising pass's few rows: the Triton thin kernel (a candidate) or ``F.linear``.

The thin kernel also takes the steps around a layer's products, each a launch fewer: ``gated``, ``x`` is a
fused gate/up projection and the product's input is SwiGLU's activation of it; ``norm``, the input is the
RMSNorm of ``x`` (the norm before q/k/v, gate/up or the LM head); ``add_to``, the product is added to the
residual stream in place (after o and down). Together they leave a layer with no separate add-norm launches.

The Triton path takes activations of at most ``MAX_ROWS`` rows (a block); longer ones (a prompt) and the
torch path go to ``F.linear`` and the torch references, whose cuBLAS kernels are the default.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import kernel_path
from kernels.fused import check_rope_inputs, qk_norm_rope, silu_mul

MAX_ROWS = 16


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gated: bool,
           norm: tuple[torch.Tensor, float] | None, add_to: torch.Tensor | None) -> None:  # fmt: skip
    if x.shape[-1] != weight.shape[-1] * (2 if gated else 1) or weight.dim() != 2 or x.dtype != weight.dtype:
        raise ValueError(f"linear: x {tuple(x.shape)} {x.dtype} and weight {tuple(weight.shape)} {weight.dtype}"
                         + (" (gated: x is gate then up, twice the weight's width)" if gated else ""))  # fmt: skip
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"linear: bias {tuple(bias.shape)} for weight {tuple(weight.shape)}")
    if norm is not None and (gated or norm[0].shape != x.shape[-1:]):
        raise ValueError(f"linear: a norm weight {tuple(norm[0].shape)} must match x's last dim {x.shape[-1]}, "
                         "and a gated product takes none")  # fmt: skip
    if add_to is not None:
        if add_to.shape != (*x.shape[:-1], weight.shape[0]) or add_to.dtype != x.dtype or not add_to.is_contiguous():
            raise ValueError(f"linear: add_to {tuple(add_to.shape)} {add_to.dtype} must be the product's shape and "
                             "dtype, contiguous")  # fmt: skip
        if add_to.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            raise ValueError("linear: add_to is updated while x is read, so it must not share x's memory")


def _dense(bias: torch.Tensor | None) -> torch.Tensor | None:
    """The kernels read a bias as one run of memory: a strided view (``b[::2]``) had been read as if it were."""
    return None if bias is None else bias.contiguous()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, path: str = "auto",
           gated: bool = False, norm: tuple[torch.Tensor, float] | None = None, add_to: torch.Tensor | None = None,
           **launch: int) -> torch.Tensor:  # fmt: skip
    """``x [..., K] @ weight [N, K]^T + bias``; ``gated``: of ``silu_mul(x [..., 2K])``; ``norm`` ``(weight [K], eps)``:
    of ``rms_norm(x) * weight``; ``add_to`` ``[..., N]``: added to it in place, and it is returned. ``launch``:
    the thin kernel's tile and split parameters (``block_n``, ``block_k``, ``split_k``, ``num_stages``,
    ``num_warps``, ``prefetch_bytes``), for the GPU check's sweeps."""
    _check(x, weight, bias, gated, norm, add_to)
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] > MAX_ROWS or kernel_path(path, x.device) == "torch":
        if norm is not None:
            x = F.rms_norm(x, x.shape[-1:], norm[0], norm[1])
        product = F.linear(silu_mul(x, path=path) if gated else x, weight, bias)
        return product if add_to is None else add_to.add_(product)
    from kernels import thin_linear_triton

    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = rows.new_empty(rows.shape[0], weight.shape[0]) if add_to is None else add_to.view(rows.shape[0], -1)
    thin_linear_triton.thin_linear(rows, weight if weight.stride(-1) == 1 else weight.contiguous(), out,
                                   gated=gated, norm_weight=None if norm is None else norm[0].contiguous(),
                                   eps=0.0 if norm is None else norm[1], bias=_dense(bias), add=add_to is not None,
                                   **launch)  # fmt: skip
    return out.view(*x.shape[:-1], weight.shape[0]) if add_to is None else add_to


def qkv_norm_rope(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  norm: tuple[torch.Tensor, float] | None, heads: int, kv_heads: int, q_weight: torch.Tensor | None,
                  k_weight: torch.Tensor | None, eps: float, cos: torch.Tensor, sin: torch.Tensor,
                  positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *, path: str = "auto",
                  **launch: int) -> torch.Tensor:  # fmt: skip
    """``qk_norm_rope(linear(x, weight, bias, norm=norm), heads, ...)``: q ``[B, T, H, D]`` of ``x`` ``[B, T,
    hidden]``, k and v written into the caches. For a block's rows on the Triton path one launch
    (``kernels.qkv_rope_triton``; ``launch``: its ``split_k``, ``num_stages``, ``num_warps``, ``prefetch_bytes``)."""
    _check(x, weight, bias, False, norm, None)
    B, T, _ = x.shape
    check_rope_inputs(B, T, weight.shape[0], heads, kv_heads, q_weight, k_weight, cos, sin, positions, k_cache,
                      v_cache)  # fmt: skip
    head_dim = weight.shape[0] // (heads + 2 * kv_heads)
    # the one-launch kernel spans a head with one power-of-two range; other head sizes take the two steps
    if B * T > MAX_ROWS or kernel_path(path, x.device) == "torch" or head_dim & (head_dim - 1):
        return qk_norm_rope(linear(x, weight, bias, path=path, norm=norm), heads, kv_heads, q_weight, k_weight, eps,
                            cos, sin, positions, k_cache, v_cache, path=path)  # fmt: skip
    from kernels import qkv_rope_triton

    return qkv_rope_triton.qkv_rope(x, weight, _dense(bias), norm, heads, kv_heads, q_weight, k_weight, eps, cos, sin,
                                    positions, k_cache, v_cache, **launch)  # fmt: skip
