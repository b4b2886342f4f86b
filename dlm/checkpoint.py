"""Load and save checkpoint directories in the families' real on-disk formats.

A directory holds config.json (+ generation_config.json), model.safetensors or shards listed in
model.safetensors.index.json, tokenizer.json and tokenizer_config.json. Tensors are read one at a time from
the memory-mapped files and assigned into a model built on the meta device, so peak memory is the model plus
one tensor, never a second copy of the checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dlm.config import CheckpointError, ModelConfig, read_json_object
from dlm.model import Transformer
from dlm.tokenizer import Tokenizer

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}

# Tensors some exporters write that carry no weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}") from None


def placement(device: str | torch.device = "auto", dtype: str | torch.dtype = "auto") -> tuple[torch.device, torch.dtype]:
    """Where a model runs and in what: ``auto`` device, CUDA when this torch sees a GPU, else the CPU; ``auto``
    dtype, bfloat16 on CUDA (half the bytes a pass reads, and what the Triton kernels were tuned and checked in)
    and float32 on the CPU (what every CPU figure in the README was measured in). A CUDA device that is not
    there is refused here, before a weight is read."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        where = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; use auto, cpu or cuda[:N]") from None
    if where.type == "cuda" and (where.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this torch ({torch.__version__}) sees {torch.cuda.device_count()} "
                         "CUDA device(s)")  # fmt: skip
    if dtype == "auto":
        dtype = torch.bfloat16 if where.type == "cuda" else torch.float32
    return where, parse_dtype(dtype)


def load_config(path: str | Path) -> ModelConfig:
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a checkpoint directory")
    gen = read_json_object(root / "generation_config.json", optional=True)
    return ModelConfig.from_hf(read_json_object(root / "config.json"), gen)


def _llada_name(name: str) -> str:
    """Map an OLMo-style LLaDA tensor name onto the shared Qwen layout."""
    renames = {
        "attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm",
        "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
        "attn_out": "self_attn.o_proj", "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
        "ff_out": "mlp.down_proj",
    }
    prefix = "model.transformer."
    if not name.startswith(prefix):
        return name
    rest = name[len(prefix):]
    if rest.startswith("wte."):
        return "model.embed_tokens." + rest[4:]
    if rest.startswith("ln_f."):
        return "model.norm." + rest[5:]
    if rest.startswith("ff_out."):
        return "lm_head." + rest[7:]
    if rest.startswith("blocks."):
        _, index, module, param = rest.split(".", 3)
        return f"model.layers.{index}.{renames.get(module, module)}.{param}"
    return name


def _weight_files(root: Path) -> list[Path]:
    index = root / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(read_json_object(index).get("weight_map", {}).values()))
        if not shards:
            raise CheckpointError(f"{index}: empty weight_map")
        return [root / s for s in shards]
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{root}: no *.safetensors weight file")
    return files


def _iter_tensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    for file in files:
        if not file.exists():
            raise CheckpointError(f"{file}: weight shard listed in the index is missing")
        try:
            handle = safe_open(str(file), framework="pt")
        except Exception as exc:  # safetensors raises its own error types for truncated/corrupt files
            raise CheckpointError(f"{file}: unreadable safetensors file ({exc})") from None
        with handle as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, f.get_tensor(name)


def load_model(path: str | Path, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu") -> Transformer:
    root = Path(path)
    cfg = load_config(root)
    dtype = parse_dtype(dtype)
    with torch.device("meta"):
        model = Transformer(cfg)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    tensors: dict[str, torch.Tensor] = {}
    for raw_name, tensor in _iter_tensors(_weight_files(root)):
        name = _llada_name(raw_name) if cfg.weight_layout == "llada" else raw_name
        if name.endswith(_IGNORED_SUFFIXES) or (cfg.tie_word_embeddings and name == "lm_head.weight"):
            continue
        if name not in expected:
            raise CheckpointError(f"{root}: unexpected tensor {raw_name!r} for model_type {cfg.model_type!r}")
        if tuple(tensor.shape) != tuple(expected[name]):
            raise CheckpointError(
                f"{root}: tensor {raw_name!r} has shape {tuple(tensor.shape)}, expected {tuple(expected[name])}"
            )
        tensors[name] = tensor.to(device=device, dtype=dtype)
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise CheckpointError(f"{root}: missing tensor(s) {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    model.load_state_dict(tensors, assign=True, strict=True)
    model.rotary = type(model.rotary)(cfg).to(device)  # buffers were built on meta
    return model.eval().requires_grad_(False)


# The mask token's text in each family's real tokenizer, for configs that do not store its id
# (Fast-dLLM v2's config.json has no mask_token_id; its code hard-codes the real id).
MASK_TOKEN_TEXT = {"sdar": "<|MASK|>", "fast_dllm_qwen": "|<MASK>|", "llada": "<|mdm_mask|>", "dream": "<|mask|>",
                   "a2d-qwen3": "<|mask|>", "a2d-qwen2": "<|mask|>"}


def _tokenizer_mask_id(root: Path, cfg: ModelConfig, tokenizer: Tokenizer) -> int | None:
    """The mask id the tokenizer names: its tokenizer_config ``mask_token``, else the family's mask text."""
    declared = read_json_object(root / "tokenizer_config.json", optional=True).get("mask_token")
    text = declared.get("content") if isinstance(declared, dict) else declared
    for candidate in (text, MASK_TOKEN_TEXT.get(cfg.model_type)):
        if candidate and candidate in tokenizer.special_tokens:
            return tokenizer.special_tokens[candidate]
    return None


def load_checkpoint(
    path: str | Path, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu"
) -> tuple[Transformer, Tokenizer]:
    """The model and its tokenizer, checked against each other.

    The mask id comes from config.json where it is stored, else from the tokenizer, else the family table.
    """
    root = Path(path)
    model = load_model(root, dtype, device)
    tokenizer = Tokenizer.from_dir(root)
    if "mask_token_id" not in read_json_object(root / "config.json"):
        mask_id = _tokenizer_mask_id(root, model.cfg, tokenizer)
        if mask_id is not None:
            model.cfg = dataclasses.replace(model.cfg, mask_token_id=mask_id)
    tokenizer.check_matches(model.cfg)
    return model, tokenizer


def save_checkpoint(model: Transformer, out_dir: str | Path, dtype: str | torch.dtype = "bfloat16") -> None:
    """Write config.json + model.safetensors (tokenizer files are the caller's, they come from training)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = parse_dtype(dtype)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf = model.cfg.to_hf() | {"torch_dtype": str(dtype).removeprefix("torch.")}
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
