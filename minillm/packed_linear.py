"""A CPU speed-up kept out of the forward learners read: weights pre-packed for oneDNN.

`F.linear` hands an fp32 matmul to the BLAS library (MKL), whose kernel for a handful of
rows times a large matrix leaves much of the CPU's vector units idle. oneDNN can instead
re-arrange each weight *once*, in tiles that match its AVX-512 kernels, and then multiply
any number of rows by it: the same products in a different summation order, so results
agree with `F.linear` to float rounding. It costs a second copy of the weights in
memory. What it buys on the course machine is measured in `minillm/PERFORMANCE.md`.

One exception, also measured there: an fp32 product with only one to three rows (a
decode step of one to three sequences) is a matrix-*vector* product, limited by how
fast the weights stream in, and there MKL's kernel is the faster reader — so such a
call skips the packed copy.

`Linear` is an `nn.Linear` whose weight can be packed (`pack()`); `linear` is the
function both it and the tied `lm_head` call. Off the CPU, or without oneDNN, every call
is plain `F.linear`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PackedWeight:
    """A copy of a weight matrix [out, in] in oneDNN's blocked ("packed") layout.

    `F.linear` hands an fp32 matmul to the BLAS library (MKL), whose kernel for a
    handful of rows times a large matrix leaves much of this CPU's vector units idle.
    oneDNN can instead re-arrange the weight *once*, in tiles matching its AVX-512
    kernels, and then multiply any number of rows by it. Same products, different
    summation order: results agree with `F.linear` to float rounding (~1e-6 relative).

    The copy remembers which tensor it was made from: if the weight is replaced or
    modified in place, `matches` turns False and `linear` falls back to `F.linear`.
    """

    ROWS_HINT = 16          # oneDNN picks the tiling for about this many rows
    # Fewer rows than this: F.linear. fp32 at 1-3 rows is memory bound, and MKL's gemv
    # reads the weights 15-20 % faster than the packed kernel on the course machine;
    # in bf16 the packed kernel (AMX) wins at every row count (PERFORMANCE.md).
    MIN_ROWS = {torch.float32: 4, torch.bfloat16: 1}

    def __init__(self, weight: torch.Tensor):
        self.source = _identity(weight)
        self.min_rows = self.MIN_ROWS[weight.dtype]
        self.data = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), self.ROWS_HINT)

    def matches(self, weight: torch.Tensor) -> bool:
        return _identity(weight) == self.source

    def serves(self, x: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether `x @ weight.T` should go through this copy: the weight is still the
        one packed, and `x` has enough rows for the packed kernel to win."""
        return x.shape[0] >= self.min_rows and self.matches(weight)

    @staticmethod
    def supported(weight: torch.Tensor) -> bool:
        return (weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)
                and torch.backends.mkldnn.is_available()
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def _identity(weight: torch.Tensor) -> tuple:
    return weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           packed: PackedWeight | None = None) -> torch.Tensor:
    """x [T, in] @ weight[out, in]ᵀ (+ bias) → [T, out], through the packed copy when it
    serves (still valid, and enough rows)."""
    if packed is not None and packed.serves(x, weight):
        return torch.ops.mkldnn._linear_pointwise(x, packed.data, bias, "none", [], "")
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """`nn.Linear` whose weight can be packed for the CPU (`pack()`; see PackedWeight)."""

    packed: PackedWeight | None = None

    def pack(self) -> None:
        self.packed = PackedWeight(self.weight) if PackedWeight.supported(self.weight) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.packed)
