"""The packed-weight matmul: when it is used, and that it computes `F.linear`."""

import pytest
import torch
import torch.nn.functional as F

from minillm_cpu.packed_linear import PackedWeight, cpu_vendor, few_rows_kernels, linear

pytestmark = pytest.mark.skipif(not PackedWeight.supported(torch.zeros(1, 1)),
                                reason="needs PyTorch's oneDNN (CPU) build")

_needs_bf16 = pytest.mark.skipif(not PackedWeight.supported(torch.zeros(1, 1, dtype=torch.bfloat16)),
                                 reason="oneDNN packs bf16 weights only with AVX-512 or "
                                        "AVX-NE-CONVERT, which this CPU lacks")


def bf16(vendor, *rest):
    """A bf16 case of a parametrized test: it runs only where oneDNN can pack bf16."""
    return pytest.param(vendor, torch.bfloat16, *rest, marks=_needs_bf16)


def _weight(dtype, out_features=960, in_features=576):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(out_features, in_features, generator=gen) * 0.02).to(dtype)


def _rows(n, dtype, in_features=576):
    gen = torch.Generator().manual_seed(n)
    return torch.randn(n, in_features, generator=gen).to(dtype)


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_on_intel_fp32_matrix_vector_products_skip_the_packed_copy(rows):
    """1-3 rows in fp32 on an Intel CPU: F.linear itself (MKL's gemv reads the weights
    faster there), so the result is F.linear's to the bit — the packed kernel sums in
    another order."""
    weight = _weight(torch.float32)
    packed = PackedWeight(weight, vendor="GenuineIntel", few_rows=False)
    x = _rows(rows, torch.float32)
    assert packed.kernel_for(x, weight) == "F.linear"
    assert torch.equal(linear(x, weight, packed=packed), F.linear(x, weight))


@pytest.mark.parametrize("vendor, dtype, rows", [
    ("GenuineIntel", torch.float32, 4), ("GenuineIntel", torch.float32, 16),
    bf16("GenuineIntel", 1), bf16("GenuineIntel", 16),
    ("AuthenticAMD", torch.float32, 1), ("AuthenticAMD", torch.float32, 3),
    bf16("AuthenticAMD", 1), ("", torch.float32, 1)])
def test_packed_copy_serves_from_its_row_threshold(vendor, dtype, rows):
    """Intel: packed from 4 rows in fp32, from 1 in bf16. Any other CPU (AMD measured,
    or a maker that cannot be read): packed at every row count. (Without the few-rows
    C++ kernel, which takes fp32 products of 1-16 rows where it runs.)"""
    weight = _weight(dtype)
    packed = PackedWeight(weight, vendor=vendor, few_rows=False)
    x = _rows(rows, dtype)
    assert packed.kernel_for(x, weight) == "onednn"
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
    assert packed.kernel_for(x, weight) == "F.linear"
    assert torch.equal(linear(x, weight, packed=packed), F.linear(x, weight))


mkl = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="needs PyTorch's MKL")


@mkl
@pytest.mark.parametrize("rows", [16, 4])
def test_on_intel_fp32_the_full_batch_takes_mkls_copy_and_equals_f_linear(rows):
    """Exactly `full_batch` rows in fp32 on an Intel CPU: MKL's packed GEMM, whose
    result is F.linear's to the bit (the same MKL kernels, no reordered sums); one row
    more or fewer takes the oneDNN copy."""
    weight = _weight(torch.float32)
    packed = PackedWeight(weight, vendor="GenuineIntel", full_batch=rows, few_rows=False)
    assert packed.mkl_rows == rows
    for n, kernel in ((rows, "mkl"), (rows - 1, "onednn" if rows > 4 else "F.linear"),
                      (rows + 1, "onednn")):
        x = _rows(n, torch.float32)
        assert packed.kernel_for(x, weight) == kernel
        if kernel != "onednn":
            assert torch.equal(linear(x, weight, packed=packed), F.linear(x, weight))


@mkl
@pytest.mark.parametrize("vendor, dtype, full_batch", [
    ("AuthenticAMD", torch.float32, 16), ("", torch.float32, 16),
    bf16("GenuineIntel", 16), ("GenuineIntel", torch.float32, 3),
    ("GenuineIntel", torch.float32, None)])
def test_no_mkl_copy_where_it_is_not_worth_one(vendor, dtype, full_batch):
    """Only Intel (measured there), only fp32 (MKL's packed GEMM has no bf16), and only
    for a full batch that would not go to F.linear anyway; else no third copy."""
    weight = _weight(dtype)
    packed = PackedWeight(weight, vendor=vendor, full_batch=full_batch, few_rows=False)
    assert packed.mkl is None and packed.mkl_rows == 0
    x = _rows(16 if full_batch is None else full_batch, dtype)
    assert packed.kernel_for(x, weight) != "mkl"


@mkl
def test_a_weight_changed_in_place_leaves_the_mkl_copy_too():
    weight = _weight(torch.float32)
    packed = PackedWeight(weight, vendor="GenuineIntel", full_batch=16, few_rows=False)
    weight.mul_(2.0)
    x = _rows(16, torch.float32)
    assert packed.kernel_for(x, weight) == "F.linear"
    assert torch.equal(linear(x, weight, packed=packed), F.linear(x, weight))


def test_this_machine_uses_its_makers_threshold():
    weight = _weight(torch.float32)
    expected = 4 if cpu_vendor() == "GenuineIntel" else 1
    assert PackedWeight(weight).min_rows == expected


@pytest.mark.parametrize("few_rows", [None, False])
@pytest.mark.parametrize("vendor, dtype, full_batch", [
    ("GenuineIntel", torch.float32, 16), ("GenuineIntel", torch.float32, None),
    bf16("GenuineIntel", None), ("AuthenticAMD", torch.float32, 16)])
def test_zero_rows_give_an_empty_product(vendor, dtype, full_batch, few_rows):
    """A step in which no sequence samples (every row a mid-prompt chunk) hands the
    lm_head zero rows: F.linear's empty result, never a packed kernel (no copy has a
    row count of zero, even where there is no MKL copy and `mkl_rows` is 0)."""
    weight = _weight(dtype)
    packed = PackedWeight(weight, vendor=vendor, full_batch=full_batch, few_rows=few_rows)
    x = _rows(0, dtype)
    assert packed.kernel_for(x, weight) == "F.linear"
    assert linear(x, weight, packed=packed).shape == (0, weight.shape[0])


few_rows = pytest.mark.skipif(few_rows_kernels(torch.zeros(1, 1)) is None,
                              reason="the few-rows C++ matmul needs AVX-512 and a C++ compiler")


@few_rows
@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_fp32_products_of_1_to_16_rows_take_the_cpp_kernel(vendor):
    """Where the C++ kernels run, every fp32 product of 1-16 rows goes to
    `matmul_few_rows` (on either maker), 17 rows to oneDNN; no MKL copy is kept."""
    weight = _weight(torch.float32)
    packed = PackedWeight(weight, vendor=vendor, full_batch=16)
    assert packed.panels is not None and packed.mkl is None
    with torch.inference_mode():
        for rows in (1, 3, 4, 16, 17):
            x = _rows(rows, torch.float32)
            assert packed.kernel_for(x, weight) == ("cpp" if rows <= 16 else "onednn")
            torch.testing.assert_close(linear(x, weight, packed=packed), F.linear(x, weight),
                                       rtol=1e-5, atol=1e-5)


@few_rows
def test_bf16_weights_and_autograd_never_take_the_cpp_kernel():
    bf16 = _weight(torch.bfloat16)
    assert PackedWeight(bf16).panels is None
    with pytest.raises(ValueError, match="few_rows=None"):
        PackedWeight(bf16, few_rows=True)
    weight = _weight(torch.float32).requires_grad_()
    packed = PackedWeight(weight)
    x = _rows(4, torch.float32)
    assert packed.kernel_for(x, weight) == "F.linear"          # autograd must see it
    with torch.no_grad():
        assert packed.kernel_for(x, weight) == "cpp"
