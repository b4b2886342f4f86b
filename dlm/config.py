"""One model configuration for every supported diffusion-LM family.

Each family's config.json spells the same facts differently (``d_model`` vs ``hidden_size``, ``bd_size`` vs
``block_size``) and leaves some out entirely (LLaDA never stores its mask id in a form its code reads). This
module normalises them into :class:`ModelConfig`, taking missing values from a per-family table so the rest
of the engine never looks at a raw config dict.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class CheckpointError(ValueError):
    """A checkpoint directory cannot be used: the message names the file and the problem."""


def read_json_object(path: Path, optional: bool = False) -> dict[str, Any]:
    """The object a checkpoint's JSON file holds ({} for a missing ``optional`` file). A file that is missing,
    is not JSON or holds something else than an object is refused naming it, not left to fail at a ``.get``."""
    if optional and not path.exists():
        return {}
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got a {type(value).__name__}")
    return value


@dataclass(frozen=True)
class FamilyDefaults:
    """What a family's official code hard-codes rather than reads from config.json."""

    mask_token_id: int
    block_size: int
    token_shift: bool  # logit at position i-1 predicts token i
    bidirectional: bool  # full attention over the whole canvas (no exact KV cache)
    qk_norm: bool
    qkv_bias: bool


FAMILIES: dict[str, FamilyDefaults] = {
    "sdar": FamilyDefaults(151669, 4, token_shift=False, bidirectional=False, qk_norm=True, qkv_bias=False),
    "fast_dllm_qwen": FamilyDefaults(151665, 32, token_shift=True, bidirectional=False, qk_norm=False, qkv_bias=True),
    "a2d-qwen3": FamilyDefaults(151669, 32, token_shift=False, bidirectional=False, qk_norm=True, qkv_bias=False),
    "a2d-qwen2": FamilyDefaults(151665, 32, token_shift=False, bidirectional=False, qk_norm=False, qkv_bias=True),
    "llada": FamilyDefaults(126336, 32, token_shift=False, bidirectional=True, qk_norm=False, qkv_bias=False),
    "dream": FamilyDefaults(151666, 32, token_shift=True, bidirectional=True, qk_norm=False, qkv_bias=True),
}

# config.json spellings of model_type -> family key
MODEL_TYPE_ALIASES = {
    "sdar": "sdar",
    "fast_dllm_qwen": "fast_dllm_qwen",
    "a2d-qwen3": "a2d-qwen3",
    "a2d-qwen2": "a2d-qwen2",
    "llada": "llada",
    "dream": "dream",
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture and decoding facts of a checkpoint, family-independent."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float
    rms_norm_eps: float
    qkv_bias: bool
    qk_norm: bool
    tie_word_embeddings: bool
    mask_token_id: int
    block_size: int
    token_shift: bool
    bidirectional: bool
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...] = ()
    rope_scaling: dict[str, Any] | None = None
    weight_layout: str = "qwen"  # "qwen" or "llada": how tensors are named on disk
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def family(self) -> FamilyDefaults:
        return FAMILIES[self.model_type]

    @staticmethod
    def from_hf(raw: dict[str, Any], generation_config: dict[str, Any] | None = None) -> ModelConfig:
        """Build from a config.json dict (plus generation_config.json for stop tokens)."""
        declared = str(raw.get("model_type", "")).strip()
        family_key = MODEL_TYPE_ALIASES.get(declared.lower())
        if family_key is None:
            known = ", ".join(sorted(MODEL_TYPE_ALIASES))
            raise CheckpointError(f"config.json: unknown model_type {declared!r}; supported: {known}")
        fam = FAMILIES[family_key]
        if family_key == "llada":
            return _from_llada(raw, fam, generation_config)
        return _from_qwen(raw, family_key, fam, generation_config)

    def to_hf(self) -> dict[str, Any]:
        """A config.json for the Qwen-layout families (what the demo checkpoint ships)."""
        if self.weight_layout != "qwen":
            raise CheckpointError("to_hf only writes Qwen-layout configs")
        out: dict[str, Any] = {
            "architectures": ["SDARForCausalLM" if self.model_type == "sdar" else "Qwen2ForCausalLM"],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "rms_norm_eps": self.rms_norm_eps,
            "attention_bias": self.qkv_bias,
            "tie_word_embeddings": self.tie_word_embeddings,
            "mask_token_id": self.mask_token_id,
            "block_size": self.block_size,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
        }
        if self.eos_token_ids:
            out["eos_token_id"] = list(self.eos_token_ids)
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _require(raw: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in raw and raw[key] is not None:
            return raw[key]
    raise CheckpointError(f"config.json: missing required key {' or '.join(keys)!r}")


def _eos_ids(raw: dict[str, Any], generation_config: dict[str, Any] | None) -> tuple[int, ...]:
    ids: list[int] = []
    for source in (generation_config or {}, raw):
        value = source.get("eos_token_id")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    return tuple(ids)


def _from_qwen(
    raw: dict[str, Any], family_key: str, fam: FamilyDefaults, gen: dict[str, Any] | None
) -> ModelConfig:
    hidden = int(_require(raw, "hidden_size"))
    heads = int(_require(raw, "num_attention_heads"))
    return ModelConfig(
        model_type=family_key,
        vocab_size=int(_require(raw, "vocab_size")),
        hidden_size=hidden,
        num_layers=int(_require(raw, "num_hidden_layers")),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        intermediate_size=int(_require(raw, "intermediate_size")),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        qkv_bias=bool(raw.get("attention_bias", fam.qkv_bias)),
        qk_norm=fam.qk_norm,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        mask_token_id=int(raw.get("mask_token_id", fam.mask_token_id)),
        block_size=int(raw.get("block_size") or raw.get("bd_size") or fam.block_size),
        token_shift=fam.token_shift,
        bidirectional=fam.bidirectional,
        max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
        eos_token_ids=_eos_ids(raw, gen),
        rope_scaling=raw.get("rope_scaling"),
        weight_layout="qwen",
        extra={k: raw[k] for k in ("bos_token_id", "pad_token_id") if k in raw},
    )


def _from_llada(raw: dict[str, Any], fam: FamilyDefaults, gen: dict[str, Any] | None) -> ModelConfig:
    hidden = int(_require(raw, "d_model"))
    heads = int(_require(raw, "n_heads"))
    if raw.get("alibi") or not raw.get("rope", True):
        raise CheckpointError("config.json: LLaDA variants without RoPE (alibi) are not supported")
    return ModelConfig(
        model_type="llada",
        vocab_size=int(raw.get("embedding_size") or _require(raw, "vocab_size")),
        hidden_size=hidden,
        num_layers=int(_require(raw, "n_layers")),
        num_heads=heads,
        num_kv_heads=int(raw.get("n_kv_heads") or heads),
        head_dim=hidden // heads,
        intermediate_size=int(_require(raw, "mlp_hidden_size")),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        qkv_bias=bool(raw.get("include_qkv_bias") or raw.get("include_bias")),
        qk_norm=False,
        tie_word_embeddings=bool(raw.get("weight_tying", False)),
        mask_token_id=int(raw.get("mask_token_id", fam.mask_token_id)),
        block_size=fam.block_size,
        token_shift=False,
        bidirectional=True,
        max_position_embeddings=int(raw.get("max_sequence_length", 4096)),
        eos_token_ids=_eos_ids(raw, gen),
        rope_scaling=None,
        weight_layout="llada",
        extra={k: raw[k] for k in ("bos_token_id", "pad_token_id") if k in raw},
    )
