"""A CPU speed-up kept out of the forward learners read: weights pre-packed for oneDNN.

`F.linear` hands an fp32 matmul to the BLAS library (MKL), whose kernel for a handful of
rows times a large matrix leaves much of the CPU's vector units idle. oneDNN can instead
re-arrange each weight *once*, in tiles that match its AVX-512 kernels, and then multiply
any number of rows by it: the same products in a different summation order, so results
agree with `F.linear` to float rounding. It costs a second copy of the weights in
memory. What it buys on the course machine is measured in `minillm/PERFORMANCE.md`.

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

    def __init__(self, weight: torch.Tensor):
        self.source = _identity(weight)
        self.data = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), self.ROWS_HINT)

    def matches(self, weight: torch.Tensor) -> bool:
        return _identity(weight) == self.source

    @staticmethod
    def supported(weight: torch.Tensor) -> bool:
        return (weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)
                and torch.backends.mkldnn.is_available()
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def _identity(weight: torch.Tensor) -> tuple:
    return weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           packed: PackedWeight | None = None) -> torch.Tensor:
    """x [T, in] @ weight[out, in]ᵀ (+ bias) → [T, out], through the packed copy if valid."""
    if packed is not None and packed.matches(weight):
        return torch.ops.mkldnn._linear_pointwise(x, packed.data, bias, "none", [], "")
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """`nn.Linear` whose weight can be packed for the CPU (`pack()`; see PackedWeight)."""

    packed: PackedWeight | None = None

    def pack(self) -> None:
        self.packed = PackedWeight(self.weight) if PackedWeight.supported(self.weight) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.packed)
