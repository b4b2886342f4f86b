"""A minimal Qwen3-shaped transformer with random weights, for timing the kernel path.

Not a model: it has the shapes and the memory traffic of Qwen3 / SDAR checkpoints (fused QKV
and gate-up projections, per-head q/k RMSNorm, RoPE, SwiGLU, tied LM head) and a static KV
cache, so a denoising pass, a prefill and a batch step cost what they would in the engine.
Every input of a denoising step is a device tensor, so the whole step can be CUDA-graphed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from dlm.fused_layers import FusedLayer, Hidden, LayerSteps, decoder_layers
from kernels import block_causal_attention, select_confident
from kernels.pdl import programmatic_launch


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float = 1_000_000.0


SHAPES = {
    "qwen3-0.6b": Shape("qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936),
    "sdar-1.7b": Shape("sdar-1.7b", 2048, 28, 16, 8, 128, 6144, 151936),  # Qwen3-1.7B backbone
    "cpu-small": Shape("cpu-small", 512, 8, 8, 4, 64, 1536, 32768),  # the CPU benchmarks' default (2 cores)
    "tiny": Shape("tiny", 64, 2, 2, 1, 16, 128, 512),  # for tests and --dry-run on CPU (the interpreter is slow)
}


EPS = 1e-6  # Qwen3's rms_norm_eps


class RandomQwen3:
    """Random weights and a static ``[layers, B, capacity, Hkv, D]`` KV cache on one device."""

    def __init__(
        self, shape: Shape, batch: int, capacity: int, device: torch.device, dtype: torch.dtype, path: str
    ) -> None:
        self.shape, self.path = shape, path
        self.thin = False  # the block's matrix products on the Triton thin kernel (a candidate) instead of cuBLAS
        self.pdl = False  # a denoising step's Triton kernels launched with PDL (kernels.pdl; a candidate)
        self.prefetch_bytes: int | None = None  # the thin kernels' L2 prefetch budget, for the GPU check's sweep
        s = shape
        qkv_out = (s.heads + 2 * s.kv_heads) * s.head_dim

        def w(*dims: int) -> torch.Tensor:
            return torch.randn(*dims, device=device, dtype=dtype) * 0.02

        self.embed = w(s.vocab, s.hidden)  # tied with the LM head
        self.layers = [
            FusedLayer(qkv=w(qkv_out, s.hidden), qkv_bias=None, o=w(s.hidden, s.heads * s.head_dim),
                       gate_up=w(2 * s.intermediate, s.hidden), down=w(s.hidden, s.intermediate),
                       in_norm=torch.ones(s.hidden, device=device, dtype=dtype),
                       post_norm=torch.ones(s.hidden, device=device, dtype=dtype),
                       q_norm=torch.ones(s.head_dim, device=device, dtype=dtype),
                       k_norm=torch.ones(s.head_dim, device=device, dtype=dtype))
            for _ in range(s.layers)
        ]  # fmt: skip
        self.final_norm = torch.ones(s.hidden, device=device, dtype=dtype)
        self.new_cache(batch, capacity)

    def new_cache(self, batch: int, capacity: int) -> None:
        """(Re)allocate the KV cache and RoPE tables; the weights are kept."""
        s, device, dtype = self.shape, self.embed.device, self.embed.dtype
        self.batch, self.capacity = batch, capacity
        self.k_cache = self.v_cache = None  # free the old cache before allocating the new one
        cache = (s.layers, batch, capacity, s.kv_heads, s.head_dim)
        self.k_cache = torch.zeros(cache, device=device, dtype=dtype)
        self.v_cache = torch.zeros(cache, device=device, dtype=dtype)
        inv_freq = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2, device=device).float() / s.head_dim)
        angles = torch.arange(capacity, device=device).float()[:, None] * inv_freq[None, :]
        self.cos, self.sin = angles.cos(), angles.sin()  # [capacity, D/2]

    @property
    def label(self) -> str:
        return self.steps.label

    def weight_bytes(self) -> int:
        """Bytes a block pass must read: every layer weight plus the (tied) LM head once."""
        tensors = [getattr(p, f.name) for p in self.layers for f in fields(p)] + [self.embed, self.final_norm]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    @property
    def steps(self) -> LayerSteps:
        """How the layers launch, from ``path``, ``thin``, ``pdl`` and ``prefetch_bytes``."""
        return LayerSteps(self.path, self.thin, self.pdl, self.prefetch_bytes)

    def _layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                attend: Callable[[int, torch.Tensor], torch.Tensor]) -> Hidden:  # fmt: skip
        """Every layer over ``x`` (the residual stream, updated in place), writing each layer's K/V at
        ``positions``; ``attend(layer, q)`` is the attention. Returns the final-normed hidden states."""
        s = self.shape
        return decoder_layers(self.steps, self.layers, self.final_norm, (s.heads, s.kv_heads), EPS, x, (cos, sin),
                              positions, lambda i: (self.k_cache[i], self.v_cache[i]), attend)  # fmt: skip

    def prefill(self, tokens: torch.Tensor, block_size: int) -> None:
        """Fill cache positions ``0..L-1`` with block-causal attention (no logits are needed)."""
        L = tokens.shape[1]

        def attend(i: int, q: torch.Tensor) -> torch.Tensor:
            return block_causal_attention(q, self.k_cache[i][:, :L], self.v_cache[i][:, :L], block_size, path=self.path)

        positions = torch.arange(L, device=tokens.device)
        self._layers(self.embed[tokens], self.cos[:L], self.sin[:L], positions, attend)

    def block_logits(self, tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """One pass over a block at positions ``start..start+T-1`` (``start`` a 1-element tensor)."""
        B, T = tokens.shape
        positions = start + torch.arange(T, device=tokens.device)
        lengths = (start + T).to(torch.int32).repeat(B)  # prefix + block, the block's K/V written this pass

        def attend(i: int, q: torch.Tensor) -> torch.Tensor:
            return self.steps.attention(q, self.k_cache[i], self.v_cache[i], lengths)

        h = self._layers(self.embed[tokens], self.cos[positions], self.sin[positions], positions, attend)
        return self.steps.product(h, self.embed)

    def denoise_step(
        self, tokens: torch.Tensor, masked: torch.Tensor, start: torch.Tensor, threshold: float = 0.9
    ) -> torch.Tensor:
        """A full denoising step: the pass, then fused confidence selection updating the block in place."""
        with programmatic_launch(self.pdl):
            logits = self.block_logits(tokens, start)
            _, _, count = select_confident(logits, masked, tokens, threshold, path=self.path)
        return count
