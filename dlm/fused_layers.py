"""A model's denoising pass as fused steps: what a graphed pass and its prefill run on every block-causal family.

Through :mod:`dlm.model`'s layers a 16-token pass is about 40 kernels per layer (separate q, k, v and gate, up
products, RMSNorm's casts, RoPE's halves, the cache concatenation), and on a GPU most of them are launches
that move a few kilobytes. Here a layer is its four matrix products (q/k/v and gate/up each concatenated once,
biases too where the family has them), one q/k norm (Qwen3-style layers) + RoPE + KV write, the block
attention over the cache, two residual-add + RMSNorms and one SwiGLU activation: the layer
``latency_bench.gpu_shapes`` times, which on an H200 ran a 1.7B pass in about half the time of the same
kernels unfused (``latency_bench/results/gpu_check_h200_2026-12-04_run3.md``).

The model's own q/k/v and gate/up weights are rebound as views of the concatenated ones, so no memory is
doubled and the eager paths (prefill without graphs, commit passes) keep working.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dlm.kv_cache import KVCache
from dlm.model import Transformer
from kernels.block_attention import block_attention, block_causal_attention
from kernels.fused import add_rms_norm, qk_norm_rope, silu_mul


@dataclass(frozen=True)
class FusedLayer:
    """One decoder layer's weights in the fused layout (``[out, in]`` matrices, like ``nn.Linear``)."""

    qkv: torch.Tensor  # q, k, v projections stacked: [(H + 2 Hkv) D, hidden]
    qkv_bias: torch.Tensor | None  # their biases stacked (Qwen2-style layers), or None
    o: torch.Tensor
    gate_up: torch.Tensor  # gate then up: [2 I, hidden]
    down: torch.Tensor
    in_norm: torch.Tensor
    post_norm: torch.Tensor
    q_norm: torch.Tensor | None  # per-head q/k RMSNorm weights (Qwen3-style layers), or None
    k_norm: torch.Tensor | None


def _stack(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the linears' weights (and biases, if they have them) and rebind each as a view of its rows."""
    stacked = torch.cat([linear.weight.detach() for linear in linears])
    biases = torch.cat([linear.bias.detach() for linear in linears]) if linears[0].bias is not None else None
    row = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = nn.Parameter(stacked[row:row + rows], requires_grad=False)
        if biases is not None:
            linear.bias = nn.Parameter(biases[row:row + rows], requires_grad=False)
        row += rows
    return stacked, biases


def _fused(layer: nn.Module) -> FusedLayer:
    attn, mlp = layer.self_attn, layer.mlp
    qkv, qkv_bias = _stack([attn.q_proj, attn.k_proj, attn.v_proj])
    norms = (attn.q_norm.weight.detach(), attn.k_norm.weight.detach()) if hasattr(attn, "q_norm") else (None, None)
    return FusedLayer(qkv=qkv, qkv_bias=qkv_bias, o=attn.o_proj.weight.detach(),
                      gate_up=_stack([mlp.gate_proj, mlp.up_proj])[0], down=mlp.down_proj.weight.detach(),
                      in_norm=layer.input_layernorm.weight.detach(),
                      post_norm=layer.post_attention_layernorm.weight.detach(), q_norm=norms[0], k_norm=norms[1])


_FUSED: weakref.WeakKeyDictionary[Transformer, list[FusedLayer]] = weakref.WeakKeyDictionary()


def fused_layers(model: Transformer) -> list[FusedLayer]:
    """The model's layers in the fused layout, built on first use and kept for the model's lifetime.

    Building rebinds the model's projection weights, so it must happen before any CUDA graph captures them:
    :class:`dlm.graphed_forward.GraphedForward` asks for it when it is made, before its first capture. The
    model is for inference from then on (the rebound weights no longer require gradients)."""
    layers = _FUSED.get(model)
    if layers is None:
        with torch.no_grad():
            layers = _FUSED[model] = [_fused(layer) for layer in model.model.layers]
    return layers


def _hidden_states(model: Transformer, layers: list[FusedLayer], cache: KVCache, ids: torch.Tensor,
                   positions: torch.Tensor, attend: Callable[[int, torch.Tensor], torch.Tensor], kernels: str
                   ) -> torch.Tensor:  # fmt: skip
    """Final-normed hidden states ``[1, n, hidden]`` of ``ids`` ``[1, n]`` at ``positions`` ``[n]``, every
    layer writing its K/V into the cache there; ``attend(layer, q)`` is the attention over the cache."""
    cfg, eps = model.cfg, model.cfg.rms_norm_eps
    cos, sin = (table[:, : cfg.head_dim // 2] for table in model.rotary(positions))
    x = model.model.embed_tokens(ids)  # the residual stream, updated in place
    h = model.model.layers[0].input_layernorm(x)
    for i, p in enumerate(layers):
        k_cache, v_cache = _sequence_major(cache, i)
        q = qk_norm_rope(F.linear(h, p.qkv, p.qkv_bias), cfg.num_heads, cfg.num_kv_heads, p.q_norm, p.k_norm, eps, cos, sin,
                         positions, k_cache, v_cache, path=kernels)  # fmt: skip
        h = add_rms_norm(x, F.linear(attend(i, q).flatten(2), p.o), p.post_norm, eps, path=kernels)
        following = layers[i + 1].in_norm if i + 1 < len(layers) else model.model.norm.weight
        h = add_rms_norm(x, F.linear(silu_mul(F.linear(h, p.gate_up), path=kernels), p.down), following, eps,
                         path=kernels)  # fmt: skip
    return h


def _sequence_major(cache: KVCache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's K and V caches as the kernels take them, ``[B, capacity, Hkv, D]`` views."""
    return cache.k[layer].transpose(1, 2), cache.v[layer].transpose(1, 2)


def fused_window_logits(model: Transformer, layers: list[FusedLayer], cache: KVCache, ids: torch.Tensor,
                        length: torch.Tensor, store: int, kernels: str) -> torch.Tensor:  # fmt: skip
    """Logits ``[n, V]`` of ``ids`` ``[1, n]`` placed after the first ``length`` cached positions (a 1-element
    device tensor, so a CUDA graph can replay this for any length).

    Every row's K/V is written into the cache at ``length..length+n-1``; rows past the first ``store`` are
    scratch there (the cache's length does not move, and the next pass overwrites them), which is what lets
    the block attention read the window from the cache in place. The first ``store`` rows (a finished block
    committed in the same pass) attend to the cache and themselves only; the rest attend to everything."""
    n = ids.shape[1]

    def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
        k_cache, v_cache = _sequence_major(cache, layer)
        if not store:
            return block_attention(q, k_cache, v_cache, length + n, path=kernels)
        out = torch.empty_like(q)
        block_attention(q[:, :store], k_cache, v_cache, length + store, out=out[:, :store], path=kernels)
        block_attention(q[:, store:], k_cache, v_cache, length + n, out=out[:, store:], path=kernels)
        return out

    positions = length + torch.arange(n, device=ids.device)
    return F.linear(_hidden_states(model, layers, cache, ids, positions, attend, kernels)[0], model.output_weight())


def fused_prefill_chunk(model: Transformer, layers: list[FusedLayer], cache: KVCache, ids: torch.Tensor,
                        start: int | torch.Tensor, block_size: int, kernels: str) -> torch.Tensor:  # fmt: skip
    """Hidden states ``[1, n, hidden]`` of a prompt chunk ``ids`` ``[1, n]`` at positions ``start..``, block-causal
    over absolute positions, its K/V stored there (what :func:`dlm.decoding.prefill.prefill_blocks` runs per
    chunk; the caller commits it). With ``start`` a 1-element device tensor (a graphed prefill) the attention
    reads the whole cache: the block-causal rule hides every block after the queries' own, so the chunk must
    then end on a block boundary (else its last block's queries would see stale rows after it)."""
    n = ids.shape[1]
    if isinstance(start, int):
        cache.check_room(n)  # start is the cache's length (a device start: the caller checked)

    def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
        k_cache, v_cache = _sequence_major(cache, layer)
        if isinstance(start, int):
            k_cache, v_cache = k_cache[:, : start + n], v_cache[:, : start + n]
        return block_causal_attention(q, k_cache, v_cache, block_size, q_offset=start, path=kernels)

    positions = start + torch.arange(n, device=ids.device)
    return _hidden_states(model, layers, cache, ids, positions, attend, kernels)
