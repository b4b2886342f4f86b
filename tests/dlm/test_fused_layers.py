"""The fused layer path: the same logits and cache contents as the model's own layers, with the weights stacked
in place rather than copied, on both kernel paths (Triton interpreted on the CPU) and on the thin product that
takes the add-norms in, for Qwen3-style layers (q/k norms) and Qwen2-style ones (q/k/v biases)."""

import pytest
import torch

from dlm.checkpoint import load_checkpoint
from dlm.decoding.block_causal import CachedForward
from dlm.decoding.prefill import prefill_blocks
from dlm.fused_layers import LayerSteps, fused_layers, fused_prefill_chunk, fused_window_logits
from dlm.kv_cache import KVCache
from kernels.dispatch import triton_available

needs_triton = pytest.mark.skipif(not triton_available(), reason="needs the triton package")
STEPS = [pytest.param(LayerSteps("torch"), id="torch"), pytest.param(LayerSteps("triton"), id="triton", marks=needs_triton),
         pytest.param(LayerSteps("triton", thin=True), id="thin", marks=needs_triton)]  # fmt: skip


def test_stacking_rebinds_the_projections_as_views_without_changing_them(fixtures_dir):
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    before = {name: t.clone() for name, t in model.state_dict().items()}
    layers = fused_layers(model)
    assert fused_layers(model) is layers  # built once per model
    attn, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    for linear in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert linear.weight.untyped_storage().data_ptr() == layers[1].qkv.untyped_storage().data_ptr()
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == layers[1].gate_up.untyped_storage().data_ptr()
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), name


def test_qwen2_style_layers_stack_their_biases_and_have_no_qk_norm(fixtures_dir):
    model, _ = load_checkpoint(fixtures_dir / "fast_dllm_v2" / "checkpoint")
    layer = fused_layers(model)[0]
    attn = model.model.layers[0].self_attn
    assert layer.q_norm is None and layer.k_norm is None
    assert layer.qkv_bias is not None and layer.qkv_bias.shape == (layer.qkv.shape[0],)
    assert torch.equal(layer.qkv_bias[-attn.v_proj.bias.shape[0]:], attn.v_proj.bias)
    assert attn.v_proj.bias.untyped_storage().data_ptr() == layer.qkv_bias.untyped_storage().data_ptr()


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])  # Qwen3-style layers, and Qwen2-style (biases)
@pytest.mark.parametrize("steps", STEPS)
def test_fused_pass_matches_the_models_layers(fixtures_dir, steps, family):
    model, _ = load_checkpoint(fixtures_dir / family / "checkpoint")
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.cfg.vocab_size - 2, (13,), generator=gen).tolist()
    eager, fused_cache = CachedForward(model, KVCache(model.cfg, 64)), KVCache(model.cfg, 64)
    eager.extend(prompt, 4)
    fused_cache.k.copy_(eager.cache.k)
    fused_cache.v.copy_(eager.cache.v)
    mask = model.cfg.mask_token_id
    window, pending = torch.tensor([mask, 7, mask, mask]), torch.tensor([21, 22, 23, 24])
    length = torch.tensor([eager.length])
    layers = fused_layers(model)

    got = fused_window_logits(model, layers, fused_cache, window[None], length, store=0, steps=steps)
    torch.testing.assert_close(got, eager.denoise(window, torch.arange(4)), atol=1e-5, rtol=1e-5)

    # A finished block committed in the same pass: its rows do not see the window, and its K/V is stored.
    ids = torch.cat((pending, window))[None]
    got = fused_window_logits(model, layers, fused_cache, ids, length, store=4, steps=steps)
    want = eager.denoise(window, torch.arange(4), pending)
    torch.testing.assert_close(got[4:], want, atol=1e-5, rtol=1e-5)
    n = eager.length
    torch.testing.assert_close(fused_cache.k[:, :, :, :n], eager.cache.k[:, :, :, :n], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(fused_cache.v[:, :, :, :n], eager.cache.v[:, :, :, :n], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("start_on_device", [False, True], ids=["int-start", "tensor-start"])
@pytest.mark.parametrize("steps", STEPS)
def test_fused_prefill_fills_the_cache_like_the_models_layers(fixtures_dir, steps, start_on_device):
    """Two prompts in chunks of two blocks: the same K/V and last logits. With the start an int the second
    prompt starts inside a block; with the start on the device (as a graphed prefill runs, on whole blocks) the
    attention reads the whole cache, whose stale rows after the chunk must stay hidden."""
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    gen = torch.Generator().manual_seed(2)
    lengths = (12, 12) if start_on_device else (13, 11)
    first, second = (torch.randint(0, model.cfg.vocab_size - 2, (n,), generator=gen) for n in lengths)
    layers = fused_layers(model)
    caches = {name: KVCache(model.cfg, 48) for name in ("model", "fused")}
    fused = caches["fused"]
    fused.k.normal_(generator=gen)  # stale contents
    fused.v.normal_(generator=gen)

    def run_chunk(piece: torch.Tensor) -> torch.Tensor:
        start = torch.tensor([fused.length]) if start_on_device else fused.length
        return fused_prefill_chunk(model, layers, fused, piece, start, 4, steps)

    for prompt in (first, second):
        want = prefill_blocks(model, caches["model"], prompt, 4, chunk=8)
        got = prefill_blocks(model, fused, prompt, 4, chunk=8, run_chunk=run_chunk)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert fused.length == caches["model"].length == 24
    tolerance = 1e-5 if steps.thin else 1e-6  # the thin product scales by the norm after its sum, not before
    for name in ("k", "v"):
        torch.testing.assert_close(getattr(fused, name)[:, :, :, :24], getattr(caches["model"], name)[:, :, :, :24],
                                   atol=tolerance, rtol=tolerance)  # fmt: skip


def test_the_candidates_run_on_the_triton_path_only():
    for candidate in ({"thin": True}, {"pdl": True}):
        with pytest.raises(ValueError, match="Triton path"):
            LayerSteps("torch", **candidate)


@needs_triton
@pytest.mark.parametrize(("steps", "per_layer"), [(LayerSteps("triton"), 6), (LayerSteps("triton", thin=True), 5)],
                         ids=["triton (+ 4 cuBLAS products a layer)", "thin"])  # fmt: skip
def test_a_layer_is_the_launches_its_steps_promise(fixtures_dir, monkeypatch, steps, per_layer):
    """The point of the fused and thin layers is their launch count: a window pass's Triton launches, counted as
    they run (q/k norm + RoPE, attention partials and merge, two add-norms and SwiGLU's activation; or the thin
    layer's q/k/v, one-launch attention, o, gate/up and down), plus the thin LM head."""
    from kernels import attention_triton, fused_triton, qkv_rope_triton, thin_linear_triton

    launches: list[str] = []

    class Counted:
        def __init__(self, kernel) -> None:
            self.kernel = kernel

        def __getitem__(self, grid):
            launches.append(self.kernel.fn.__name__)
            return self.kernel[grid]

    for module in (attention_triton, fused_triton, qkv_rope_triton, thin_linear_triton):
        for name in dir(module):
            if name.startswith("_") and name.endswith("_kernel"):  # the launched kernels, not device helpers
                monkeypatch.setattr(module, name, Counted(getattr(module, name)))
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    cache = KVCache(model.cfg, 32)
    fused_window_logits(model, fused_layers(model), cache, torch.tensor([[5, 6, 7, 8]]), torch.tensor([8]), store=0,
                        steps=steps)  # fmt: skip
    assert len(launches) == per_layer * model.cfg.num_layers + steps.thin, launches
