"""The transformer every supported family shares: Qwen2/Qwen3-style decoder layers without a causal mask.

Diffusion LMs differ from their autoregressive parents in *who may attend to whom*, not in the layer maths, so
the model takes an explicit attention mask (``None`` means full bidirectional attention) and an optional KV
cache, and the decoding strategies decide both. Parameters are named in the HF Qwen layout so Qwen-family
safetensors load by name; the loader renames LLaDA's OLMo-style tensors into the same layout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dlm.config import CheckpointError, ModelConfig
from dlm.kv_cache import KVCache


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 like every reference implementation (one fused op), then scale in the input dtype.
        return self.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for the rotate-half RoPE convention, with the rope_scaling kinds real configs use."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.head_dim
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.attention_scaling = 1.0
        scaling = cfg.rope_scaling or {}
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind in (None, "default"):
            pass
        elif kind == "linear":
            inv_freq = inv_freq / float(scaling["factor"])
        elif kind == "llama3":
            inv_freq = _llama3_inv_freq(inv_freq, scaling)
        elif kind == "yarn":
            inv_freq, self.attention_scaling = _yarn_inv_freq(inv_freq, scaling, cfg)
        else:
            raise CheckpointError(f"config.json: unsupported rope_scaling type {kind!r}")
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling


def _llama3_inv_freq(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_ctx = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_ctx / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
    mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
    return torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)


def _yarn_inv_freq(inv_freq: torch.Tensor, s: dict, cfg: ModelConfig) -> tuple[torch.Tensor, float]:
    factor = float(s["factor"])
    old_ctx = float(s.get("original_max_position_embeddings", cfg.max_position_embeddings))
    beta_fast, beta_slow = float(s.get("beta_fast", 32)), float(s.get("beta_slow", 1))
    dim = cfg.head_dim

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_ctx / (rotations * 2 * math.pi)) / (2 * math.log(cfg.rope_theta))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    ramp = ((torch.arange(dim // 2).float() - low) / max(high - low, 1e-3)).clamp(0, 1)
    extrapolation = 1 - ramp
    mixed = inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation
    return mixed, float(s.get("attention_factor") or 0.1 * math.log(factor) + 1.0)


def rope_tables(cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L, D] cos/sin as ``apply_rope`` takes them, once per forward: broadcast over heads, in the
    activations' dtype, and the sine's first half negated, so rotate-half is a swap of the halves."""
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos[:, None].to(dtype), signed_sin[:, None].to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, L, D]; tables from :func:`rope_tables`: ``x * cos + rotate_half(x) * sin``."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * signed_sin


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
    """[B, H, L, D] attention with GQA (fewer K/V heads than query heads) and an optional bool mask.

    Under CPU autocast it runs in fp32: with bf16 attention an eager demo training step was no faster than
    all-fp32 (263 vs 260 ms, its backward slower), with fp32 attention and bf16 projections it was 206 ms."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            return sdpa(q.float(), k.float(), v.float(), attn_mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=k.shape[1] != q.shape[1])


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        attn_mask: torch.Tensor | None,
        cache: KVCache | None,
    ) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None and hasattr(cache, "attention"):  # a cache that runs its own attention kernel
            out = cache.attention(self.layer_index, q, k, v, attn_mask)
        else:
            if cache is not None:
                k, v = cache.update(self.layer_index, k, v)
            out = sdpa(q, k, v, attn_mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_index)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        attn_mask: torch.Tensor | None,
        cache: KVCache | None,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, attn_mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Transformer(nn.Module):
    """Token ids in, logits out; attention pattern and cache are the caller's choice.

    ``forward(ids, position_ids, attn_mask, cache)``:
    - ``ids`` [B, L]; ``position_ids`` [L] or [B, L] (default: continue after the cache's length);
    - ``attn_mask`` bool [L, S] or [B, L, S], True = may attend, where S counts the cached keys first;
      ``None`` = every query sees every key (what a denoising pass over a block needs);
    - ``cache``: a :class:`KVCache` whose ``update`` decides whether the new keys are stored.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.rotary = RotaryEmbedding(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def output_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight

    def hidden_states(
        self,
        ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        if position_ids is None:
            start = cache.length if cache is not None else 0
            position_ids = torch.arange(start, start + ids.shape[1], device=ids.device)
        if position_ids.dim() == 1:
            position_ids = position_ids.expand(ids.shape[0], -1)
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask[:, None]  # broadcast over heads
        x = self.model.embed_tokens(ids)
        rope = rope_tables(*self.rotary(position_ids), x.dtype)
        for layer in self.model.layers:
            x = layer(x, rope, attn_mask, cache)
        return self.model.norm(x)

    def forward(
        self,
        ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        return F.linear(self.hidden_states(ids, position_ids, attn_mask, cache), self.output_weight())


def block_causal_mask(length: int, block_size: int, device: torch.device | None = None) -> torch.Tensor:
    """Query i may attend key j iff j's block is not after i's block (blocks aligned at position 0)."""
    block = torch.arange(length, device=device) // block_size
    return block[None, :] <= block[:, None]
