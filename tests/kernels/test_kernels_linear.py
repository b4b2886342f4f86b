"""The thin matrix product (Triton, interpreted) against ``F.linear``: sizes off the tiles, split K, dtypes."""

import pytest
import torch
import torch.nn.functional as F

from kernels.linear import linear
from kernels.reference import silu_mul_ref

pytest.importorskip("triton")

TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-2), torch.bfloat16: (5e-2, 5e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("rows", "n", "k", "launch"), [
    (16, 96, 256, {}),
    (5, 37, 200, {"block_n": 16, "block_k": 64}),  # nothing a multiple of its tile
    (16, 40, 300, {"block_n": 16, "block_k": 64, "split_k": 3}),  # K split: the last split sums the partials
    (1, 16, 48, {"block_n": 16, "block_k": 32, "split_k": 4}),  # more splits asked for than K has tiles
    (16, 24, 2300, {}),  # K past 2048: split by default, 1536 columns a split
])  # fmt: skip
def test_thin_linear_matches_f_linear(dtype, rows, n, k, launch):
    gen = torch.Generator().manual_seed(rows * n + k)
    x = torch.randn(1, rows, k, generator=gen).to(dtype)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(dtype)
    want = F.linear(x.float(), weight.float())
    got = linear(x, weight, path="triton", **launch)
    assert got.shape == (1, rows, n) and got.dtype == dtype
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), want, atol=atol, rtol=rtol)
    from kernels import split_count_triton, thin_linear_triton

    poisoned = torch.full((rows, n), float("nan"), dtype=dtype)  # every element must be written
    thin_linear_triton.thin_linear(x[0], weight, poisoned, **launch)  # a second launch: the split counts are zero
    torch.testing.assert_close(poisoned, got[0], atol=0.0, rtol=0.0)
    assert split_count_triton.device_counts(x.device).count_nonzero() == 0


def test_a_split_product_with_more_column_tiles_than_counters_is_refused(monkeypatch):
    from kernels import split_count_triton

    monkeypatch.setattr(split_count_triton, "COUNTERS", 2)
    x, weight = torch.randn(4, 300), torch.randn(40, 300)
    with pytest.raises(ValueError, match="3 split tiles in one launch; at most 2"):
        linear(x, weight, path="triton", block_n=16, split_k=3)
    torch.testing.assert_close(linear(x, weight, path="triton", block_n=16), F.linear(x, weight))  # unsplit: no count


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "n", "k", "launch"), [
    (16, 40, 96, {"block_n": 16, "block_k": 64}),
    (3, 24, 2300, {}),  # K split: each split reads its own gate and up columns
])  # fmt: skip
def test_a_gated_product_is_the_down_projection_of_swiglu(dtype, rows, n, k, launch):
    gen = torch.Generator().manual_seed(n + k)
    gate_up = (torch.randn(rows, 2 * k, generator=gen) * 2.0).to(dtype)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(dtype)
    want = F.linear(silu_mul_ref(gate_up).float(), weight.float())  # silu rounded to the dtype, as silu_mul does
    got = linear(gate_up, weight, path="triton", gated=True, **launch)
    # the interpreter rounds bf16 intermediates its own way: most activations differ by an ulp either way, which
    # over K = 2300 terms adds up to about 1% of the outputs' scale (a wrong column would be all of it)
    scale = want.abs().max().item() * (2e-2 if dtype == torch.bfloat16 else 1e-5)
    torch.testing.assert_close(got.float(), want, atol=scale, rtol=0.0)
    with pytest.raises(ValueError, match="gate then up"):
        linear(gate_up[:, :k], weight, path="triton", gated=True)


def test_many_rows_and_the_torch_path_are_f_linear():
    x, weight = torch.randn(40, 32), torch.randn(24, 32)
    torch.testing.assert_close(linear(x, weight, path="triton"), F.linear(x, weight))
    torch.testing.assert_close(linear(x[:8], weight, path="torch"), F.linear(x[:8], weight))
    gate_up = torch.randn(40, 48)
    torch.testing.assert_close(linear(gate_up, weight[:, :24], path="triton", gated=True),
                               F.linear(silu_mul_ref(gate_up), weight[:, :24]))  # fmt: skip
    with pytest.raises(ValueError, match="linear"):
        linear(x, torch.randn(24, 31), path="torch")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "n", "k", "launch"), [
    (16, 96, 256, {}),
    (5, 37, 200, {"block_n": 16, "block_k": 64}),  # nothing a multiple of its tile
    (3, 24, 2300, {"split_k": 3}),  # K split: the last split scales by the whole rows' sums of squares
])  # fmt: skip
def test_a_normed_product_is_the_product_of_the_rms_norm(dtype, rows, n, k, launch):
    gen = torch.Generator().manual_seed(n * k)
    x = (torch.randn(rows, k, generator=gen) * 3.0).to(dtype)  # not unit scale: the norm's scale matters
    norm_weight = (1.0 + torch.randn(k, generator=gen) * 0.3).to(dtype)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(dtype)
    want = F.linear(F.rms_norm(x.float(), (k,), norm_weight.float(), 1e-6), weight.float())
    got = linear(x, weight, path="triton", norm=(norm_weight, 1e-6), **launch)
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), want, atol=atol, rtol=rtol)
    unnormed = linear(x, weight, path="triton", **launch).float()  # the check above could not pass by accident
    assert (unnormed - want).abs().max() > 10 * atol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "n", "k", "launch", "gated"), [
    (16, 40, 96, {"block_n": 16, "block_k": 64}, False),
    (7, 24, 2300, {}, True),  # a down projection: K split, the last split of a column tile adds to the residual
])  # fmt: skip
def test_a_product_added_to_the_residual_stream_updates_it_in_place(dtype, rows, n, k, launch, gated):
    gen = torch.Generator().manual_seed(rows + n)
    x = torch.randn(1, rows, k * (2 if gated else 1), generator=gen).to(dtype)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(dtype)
    residual = (torch.randn(1, rows, n, generator=gen) * 4.0).to(dtype)
    want = residual.clone().add_(linear(x, weight, path="torch", gated=gated))  # the product rounded, then added
    returned = linear(x, weight, path="triton", gated=gated, add_to=residual, **launch)
    assert returned is residual
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(residual, want, atol=atol * 4, rtol=rtol)


def test_the_folded_steps_on_many_rows_and_the_torch_path_are_the_references():
    gen = torch.Generator().manual_seed(7)
    x, weight, norm_weight = torch.randn(40, 32, generator=gen), torch.randn(24, 32, generator=gen), torch.rand(32)
    normed = F.linear(F.rms_norm(x, (32,), norm_weight, 1e-5), weight)
    for path, rows in (("triton", 40), ("torch", 8)):
        torch.testing.assert_close(linear(x[:rows], weight, path=path, norm=(norm_weight, 1e-5)), normed[:rows])
        residual = torch.ones(rows, 24)
        assert linear(x[:rows], weight, path=path, add_to=residual) is residual
        torch.testing.assert_close(residual, 1.0 + F.linear(x[:rows], weight))


def test_folded_steps_that_cannot_work_are_refused():
    x, weight = torch.randn(4, 32), torch.randn(24, 32)
    with pytest.raises(ValueError, match="norm weight"):
        linear(x, weight, path="triton", norm=(torch.ones(31), 1e-6))
    with pytest.raises(ValueError, match="gated product takes none"):
        linear(torch.randn(4, 64), weight, path="triton", gated=True, norm=(torch.ones(64), 1e-6))
    with pytest.raises(ValueError, match="add_to"):
        linear(x, weight, path="triton", add_to=torch.zeros(4, 23))
    square = torch.randn(4, 32)
    with pytest.raises(ValueError, match="must not share x's memory"):
        linear(square, torch.randn(32, 32), path="triton", add_to=square)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("k", "normed"), [(96, True), (2300, False)])  # Qwen2-style q/k/v; a K split's sum
def test_a_bias_is_added_once_whether_or_not_k_is_split(dtype, k, normed):
    gen = torch.Generator().manual_seed(k)
    x, norm_weight = torch.randn(9, k, generator=gen).to(dtype), (1.0 + torch.rand(k, generator=gen)).to(dtype)
    weight, bias = (torch.randn(40, k, generator=gen) * 0.1).to(dtype), (torch.randn(40, generator=gen) * 5).to(dtype)
    norm = (norm_weight, 1e-6) if normed else None
    want = F.linear(F.rms_norm(x.float(), (k,), norm_weight.float(), 1e-6) if normed else x.float(), weight.float(),
                    bias.float())  # fmt: skip
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(linear(x, weight, bias, path="triton", norm=norm).float(), want, atol=atol, rtol=rtol)
    torch.testing.assert_close(linear(x, weight, bias, path="torch", norm=norm).float(), want, atol=atol, rtol=rtol)
    with pytest.raises(ValueError, match="bias"):
        linear(x, weight, bias[:-1], path="triton")
