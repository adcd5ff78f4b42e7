"""The packed-weight matmul: when it is used, and that it computes `F.linear`."""

import pytest
import torch
import torch.nn.functional as F

from minillm.packed_linear import PackedWeight, linear

pytestmark = pytest.mark.skipif(not PackedWeight.supported(torch.zeros(1, 1)),
                                reason="needs PyTorch's oneDNN (CPU) build")


def _weight(dtype, out_features=960, in_features=576):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(out_features, in_features, generator=gen) * 0.02).to(dtype)


def _rows(n, dtype, in_features=576):
    gen = torch.Generator().manual_seed(n)
    return torch.randn(n, in_features, generator=gen).to(dtype)


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_fp32_matrix_vector_products_skip_the_packed_copy(rows):
    """1-3 rows in fp32: F.linear itself (MKL's gemv reads the weights faster), so the
    result is F.linear's to the bit — the packed kernel sums in another order."""
    weight = _weight(torch.float32)
    packed = PackedWeight(weight)
    x = _rows(rows, torch.float32)
    assert not packed.serves(x, weight)
    assert torch.equal(linear(x, weight, packed=packed), F.linear(x, weight))


@pytest.mark.parametrize("dtype, rows", [(torch.float32, 4), (torch.float32, 16),
                                         (torch.bfloat16, 1), (torch.bfloat16, 16)])
def test_packed_copy_serves_from_its_row_threshold(dtype, rows):
    weight = _weight(dtype)
    packed = PackedWeight(weight)
    x = _rows(rows, dtype)
    assert packed.serves(x, weight)
    expected = F.linear(x.float(), weight.float())
    # fp32: summation order only; bf16: the output's own rounding (8 bits of mantissa)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(linear(x, weight, packed=packed).float(), expected,
                               rtol=tol, atol=tol)


def test_a_weight_changed_in_place_falls_back_to_f_linear():
    weight = _weight(torch.float32)
    packed = PackedWeight(weight)
    weight.mul_(2.0)                       # the packed copy now holds stale values
    x = _rows(16, torch.float32)
    assert not packed.serves(x, weight)
    assert torch.equal(linear(x, weight, packed=packed), F.linear(x, weight))
