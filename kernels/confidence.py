"""Fused confidence selection for one denoising step of a diffusion block.

``select_confident`` is the call the decoding strategies make after each forward pass: pick a
token and its confidence for every still-masked position, commit those at or above the
threshold (above it when ``strict``; at least one), and update the block in place. On CUDA it
runs two Triton launches that read the logits once; elsewhere it runs the torch reference with
identical semantics (see ``kernels.reference``), so results agree up to float rounding of the
confidence.
"""

from __future__ import annotations

import torch

from kernels import reference
from kernels.dispatch import kernel_path

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_block(logits: torch.Tensor, masked: torch.Tensor | None, ids: torch.Tensor | None) -> None:
    if logits.dim() not in (2, 3):
        raise ValueError(f"logits must be [N, V] or [B, N, V], got shape {tuple(logits.shape)}")
    if logits.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"logits must be fp32/fp16/bf16, got {logits.dtype}")
    lead = tuple(logits.shape[:-1])
    if masked is not None:
        if masked.dtype != torch.bool or tuple(masked.shape) != lead:
            raise ValueError(f"masked must be a bool tensor of shape {lead}, got {masked.dtype} {tuple(masked.shape)}")
        if masked.device != logits.device:
            raise ValueError("masked must be on the same device as logits")
    if ids is not None:
        if ids.dtype != torch.int64 or tuple(ids.shape) != lead:
            raise ValueError(f"ids must be an int64 tensor of shape {lead}, got {ids.dtype} {tuple(ids.shape)}")
        if ids.device != logits.device:
            raise ValueError("ids must be on the same device as logits")


def _seed(generator_seed: int | torch.Tensor | None, temperature: float) -> int | torch.Tensor:
    """A seed for the Gumbel noise; drawn from torch's default generator when not given."""
    if temperature < 0.0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if generator_seed is None:
        return int(torch.randint(0, 2**31 - 1, ())) if temperature > 0.0 else 0
    return generator_seed


def _triton_seed(seed: int | torch.Tensor, temperature: float, device: torch.device) -> torch.Tensor | None:
    """The seed as a device tensor the kernel reads (so a CUDA graph can change it in place).

    Greedy selection needs none; an int seed costs a host-to-device copy, which CUDA-graph
    capture forbids, so graphed sampling must pass a 1-element int64 device tensor.
    """
    if temperature == 0.0:
        return None
    if isinstance(seed, torch.Tensor):
        if seed.numel() != 1 or seed.dtype != torch.int64 or seed.device != device:
            raise ValueError("a tensor seed must be a 1-element int64 tensor on the logits' device")
        return seed.reshape(1)
    return torch.tensor([seed & 0xFFFFFFFF], dtype=torch.int64, device=device)


def _ref_seed(seed: int | torch.Tensor) -> int:
    return int(seed.reshape(())) if isinstance(seed, torch.Tensor) else seed


def confidence_and_token(
    logits: torch.Tensor,
    temperature: float = 0.0,
    generator_seed: int | torch.Tensor | None = None,
    masked: torch.Tensor | None = None,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    tempered: bool = False,
    path: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen token and its softmax probability per position, without committing anything.

    ``logits`` is ``[N, V]`` or ``[B, N, V]``; returns ``(conf fp32, token int64)`` of shape
    ``logits.shape[:-1]``. Positions with ``masked`` False get ``-inf`` / ``-1`` (and cost no
    work on the Triton path). For strategies that rank positions themselves (top-k per step).
    ``out`` optionally names contiguous ``(conf, token)`` buffers to write into. ``tempered``:
    the confidence of a sample is its probability under ``softmax(logits / temperature)``
    rather than the untempered softmax.
    """
    _check_block(logits, masked, None)
    lead = tuple(logits.shape[:-1])
    if out is not None and not (
        out[0].shape == lead and out[0].dtype == torch.float32 and out[0].is_contiguous()
        and out[1].shape == lead and out[1].dtype == torch.int64 and out[1].is_contiguous()
    ):  # fmt: skip
        raise ValueError(f"out must be contiguous (fp32, int64) tensors of shape {lead}")
    seed = _seed(generator_seed, temperature)
    if kernel_path(path, logits.device) == "torch":
        conf, token = reference.confidence_and_token_ref(logits, temperature, _ref_seed(seed), masked, tempered)
        if out is None:
            return conf, token
        return out[0].copy_(conf), out[1].copy_(token)
    from kernels import confidence_triton

    batched = logits.dim() == 3
    lg = logits if batched else logits.unsqueeze(0)
    mk = None if masked is None else (masked if batched else masked.unsqueeze(0))
    bufs = None if out is None else tuple(t if batched else t.unsqueeze(0) for t in out)
    conf, token, _ = confidence_triton.confidence_select(
        lg, mk, None, 0.0, temperature, _triton_seed(seed, temperature, logits.device), out=bufs, tempered=tempered
    )
    return (conf, token) if batched else (conf[0], token[0])


def select_confident(
    logits: torch.Tensor,
    masked: torch.Tensor,
    ids: torch.Tensor,
    threshold: float,
    temperature: float = 0.0,
    generator_seed: int | torch.Tensor | None = None,
    *,
    strict: bool = False,
    tempered: bool = False,
    path: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One confidence-threshold decoding step for a block, updating ``ids`` and ``masked`` in place.

    ``logits`` ``[N, V]`` (or ``[B, N, V]`` for B blocks), ``masked`` bool ``[N]`` (True = still a
    mask token), ``ids`` int64 ``[N]``. Every masked position gets a token (argmax at temperature
    0, a Gumbel-max sample of ``logits/temperature`` otherwise, reproducible for a given
    ``generator_seed``: an int, or a 1-element int64 device tensor under CUDA graphs) and a
    confidence (its probability under ``softmax(logits)``, or with ``tempered`` under
    ``softmax(logits / temperature)``); those with confidence ``>= threshold`` (``> threshold``
    when ``strict``) are committed, and if none is, the single most confident masked one is
    (ties: the lowest position). Returns ``(ids, masked, committed_count)`` where the count is
    an int64 tensor (0-d, or ``[B]``) left on the device so the step never forces a host sync.
    ``path`` is a ``kernels.dispatch`` setting ("auto", "triton", "torch").
    """
    _check_block(logits, masked, ids)
    seed = _seed(generator_seed, temperature)
    if kernel_path(path, logits.device) == "torch":
        return reference.select_confident_ref(
            logits, masked, ids, threshold, temperature, _ref_seed(seed), strict, tempered
        )
    from kernels import confidence_triton

    batched = logits.dim() == 3
    lg, mk, ix = (t if batched else t.unsqueeze(0) for t in (logits, masked, ids))
    _, _, count = confidence_triton.confidence_select(
        lg, mk, ix, threshold, temperature, _triton_seed(seed, temperature, logits.device),
        strict=strict, tempered=tempered,
    )
    return ids, masked, count if batched else count[0]
