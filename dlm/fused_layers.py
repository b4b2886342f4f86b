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

:class:`LayerSteps` says how the steps launch; with ``thin`` (a candidate the engine runs where its start-up
trial, :mod:`dlm.layer_trial`, measures it faster) the matrix products take the add-norms, the SwiGLU activation
and the q/k norm + RoPE + KV write in, and the block attention merges its cache splits in its last program:
5 launches a layer.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from dlm.kv_cache import KVCache
from dlm.model import Transformer
from kernels.block_attention import block_attention, block_causal_attention
from kernels.fused import add_rms_norm, qk_norm_rope, silu_mul
from kernels.linear import linear, qkv_norm_rope


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
    stacked = torch.cat([projection.weight.detach() for projection in linears])
    biases = torch.cat([projection.bias.detach() for projection in linears]) if linears[0].bias is not None else None
    row = 0
    for projection in linears:
        rows = projection.weight.shape[0]
        projection.weight = nn.Parameter(stacked[row:row + rows], requires_grad=False)
        if biases is not None:
            projection.bias = nn.Parameter(biases[row:row + rows], requires_grad=False)
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


@dataclass(frozen=True)
class PendingNorm:
    """``rms_norm(x) * weight`` not yet computed: the thin product applies it as it reads ``x``."""

    x: torch.Tensor
    weight: torch.Tensor
    eps: float


Hidden = torch.Tensor | PendingNorm


@dataclass(frozen=True)
class LayerSteps:
    """How a pass's layer steps launch. ``kernels``: the fused steps' path ("triton" or "torch"), the matrix
    products on cuBLAS. ``thin`` (Triton only; a candidate the engine's start-up trial times against the fused layer): a
    block's products on the thin kernel (:func:`kernels.linear.linear`), which takes each residual add, RMSNorm
    and SwiGLU activation in and sums its K splits itself, the q/k/v product the q/k norm, RoPE and KV
    write too, and the block attention's last split merges the partials, so a layer is 5 launches instead of 10.
    ``pdl``:
    graphed passes launch their Triton kernels with programmatic dependent launch (:mod:`kernels.pdl`).
    ``prefetch_bytes``: the L2 prefetch budget under PDL of the thin kernels and the block attention, if not
    their default (the GPU check's sweep)."""

    kernels: str = "torch"
    thin: bool = False
    pdl: bool = False
    prefetch_bytes: int | None = None

    def __post_init__(self) -> None:
        if (self.thin or self.pdl) and self.kernels != "triton":
            raise ValueError(f"the thin product and PDL run on the Triton path, not {self.kernels!r}")

    @property
    def label(self) -> str:
        """The kernel path, the matrix products' kernel and the launches: what a timing row is of."""
        return ", ".join([self.kernels] + ["thin GEMM"] * self.thin + ["PDL"] * self.pdl)

    @property
    def _launch(self) -> dict[str, int]:
        return {} if self.prefetch_bytes is None else {"prefetch_bytes": self.prefetch_bytes}

    def attention_input(self, h: Hidden, layer: FusedLayer, heads: tuple[int, int], eps: float,
                        rope: tuple[torch.Tensor, torch.Tensor], positions: torch.Tensor,
                        caches: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:  # fmt: skip
        """q of ``layer``'s attention, its k and v written into ``caches`` at ``positions``: the q/k/v product, then
        q/k norm + RoPE + KV write in one launch; with ``thin``, all of it one launch."""
        if self.thin:
            x, norm = (h.x, (h.weight, h.eps)) if isinstance(h, PendingNorm) else (h, None)
            return qkv_norm_rope(x, layer.qkv, layer.qkv_bias, norm, *heads, layer.q_norm, layer.k_norm, eps, *rope,
                                 positions, *caches, path="triton", **self._launch)  # fmt: skip
        return qk_norm_rope(self.product(h, layer.qkv, layer.qkv_bias), *heads, layer.q_norm, layer.k_norm, eps, *rope,
                            positions, *caches, path=self.kernels)  # fmt: skip

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """``q``'s attention over the first ``length`` rows of the caches (:func:`kernels.block_attention`); with
        ``thin``, one launch."""
        return block_attention(q, k_cache, v_cache, length, out=out, path=self.kernels, one_launch=self.thin,
                               **self._launch)  # fmt: skip

    def norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> Hidden:
        """``rms_norm(x) * weight``: computed now, or with ``thin`` by the product that reads it."""
        return PendingNorm(x, weight, eps) if self.thin else F.rms_norm(x, x.shape[-1:], weight, eps)

    def normed(self, h: Hidden) -> torch.Tensor:
        """``h`` computed (what a caller that is not a product needs)."""
        return F.rms_norm(h.x, h.x.shape[-1:], h.weight, h.eps) if isinstance(h, PendingNorm) else h

    def product(self, h: Hidden, weight: torch.Tensor, bias: torch.Tensor | None = None,
                gated: bool = False) -> torch.Tensor:  # fmt: skip
        """``h @ weight.T + bias`` (``gated``: of SwiGLU's activation of ``h``)."""
        if isinstance(h, PendingNorm):
            return linear(h.x, weight, bias, path="triton", norm=(h.weight, h.eps), **self._launch)
        if self.thin:
            return linear(h, weight, bias, path="triton", gated=gated, **self._launch)
        return F.linear(silu_mul(h, path=self.kernels) if gated else h, weight, bias)

    def add_norm(self, x: torch.Tensor, a: torch.Tensor, weight: torch.Tensor, norm: torch.Tensor, eps: float,
                 gated: bool = False) -> Hidden:  # fmt: skip
        """``x += a @ weight.T`` in place (``gated``: of SwiGLU's activation of ``a``), then ``rms_norm(x) *
        norm``: the add and the norm one launch, or with ``thin`` the add inside this product and the norm
        inside the next."""
        if self.thin:
            linear(a, weight, path="triton", gated=gated, add_to=x, **self._launch)
            return PendingNorm(x, norm, eps)
        return add_rms_norm(x, self.product(a, weight, gated=gated), norm, eps, path=self.kernels)


def decoder_layers(steps: LayerSteps, layers: list[FusedLayer], final_norm: torch.Tensor, heads: tuple[int, int],
                   eps: float, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], positions: torch.Tensor,
                   caches: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
                   attend: Callable[[int, torch.Tensor], torch.Tensor]) -> Hidden:  # fmt: skip
    """The final-normed hidden states of the residual stream ``x`` ``[B, n, hidden]`` (updated in place) at
    ``positions`` ``[n]``, rotated by ``rope`` (cos, sin ``[n, D/2]``), through ``layers`` of ``heads`` (q, kv)
    heads: every layer writes its K/V into ``caches(layer)`` (``[B, capacity, Hkv, D]`` each) there, and
    ``attend(layer, q)`` is its attention. The layer :mod:`dlm.fused_layers` describes; the GPU check's
    benchmark model runs the same one."""
    h = steps.norm(x, layers[0].in_norm, eps)
    for i, p in enumerate(layers):
        q = steps.attention_input(h, p, heads, eps, rope, positions, caches(i))
        h = steps.add_norm(x, attend(i, q).flatten(2), p.o, p.post_norm, eps)
        following = layers[i + 1].in_norm if i + 1 < len(layers) else final_norm
        h = steps.add_norm(x, steps.product(h, p.gate_up), p.down, following, eps, gated=True)
    return h


def _hidden_states(model: Transformer, layers: list[FusedLayer], cache: KVCache, ids: torch.Tensor,
                   positions: torch.Tensor, attend: Callable[[int, torch.Tensor], torch.Tensor], steps: LayerSteps
                   ) -> Hidden:  # fmt: skip
    """The model's final-normed hidden states of ``ids`` ``[1, n]`` at ``positions`` ``[n]``, every layer writing
    its K/V into the cache there; ``attend(layer, q)`` is the attention over the cache."""
    cfg = model.cfg
    cos, sin = (table[:, : cfg.head_dim // 2] for table in model.rotary(positions))
    return decoder_layers(steps, layers, model.model.norm.weight, (cfg.num_heads, cfg.num_kv_heads), cfg.rms_norm_eps,
                          model.model.embed_tokens(ids), (cos, sin), positions, partial(_sequence_major, cache),
                          attend)  # fmt: skip


def _sequence_major(cache: KVCache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's K and V caches as the kernels take them, ``[B, capacity, Hkv, D]`` views."""
    return cache.k[layer].transpose(1, 2), cache.v[layer].transpose(1, 2)


def fused_window_logits(model: Transformer, layers: list[FusedLayer], cache: KVCache, ids: torch.Tensor,
                        length: torch.Tensor, store: int, steps: LayerSteps) -> torch.Tensor:  # fmt: skip
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
            return steps.attention(q, k_cache, v_cache, length + n)
        out = torch.empty_like(q)
        steps.attention(q[:, :store], k_cache, v_cache, length + store, out=out[:, :store])
        steps.attention(q[:, store:], k_cache, v_cache, length + n, out=out[:, store:])
        return out

    positions = length + torch.arange(n, device=ids.device)
    return steps.product(_hidden_states(model, layers, cache, ids, positions, attend, steps), model.output_weight())[0]


def fused_prefill_chunk(model: Transformer, layers: list[FusedLayer], cache: KVCache, ids: torch.Tensor,
                        start: int | torch.Tensor, block_size: int, steps: LayerSteps) -> torch.Tensor:  # fmt: skip
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
        return block_causal_attention(q, k_cache, v_cache, block_size, q_offset=start, path=steps.kernels)

    positions = start + torch.arange(n, device=ids.device)
    return steps.normed(_hidden_states(model, layers, cache, ids, positions, attend, steps))
