"""Weights pre-packed for fast matmul kernels: what replaces `nn.Linear` on the CPU.

`F.linear` hands an fp32 matmul to the BLAS library (MKL), whose kernel for a handful of
rows times a large matrix leaves much of the CPU's vector units idle. A weight can
instead be re-arranged *once*, at load time, into the layout a faster kernel reads, and
then multiplied by any number of rows: the same products in a different summation order,
so results agree with `F.linear` to float rounding. Each layout costs a copy of the
weights in memory; `docs/performance.md` says what each buys and how it was measured.

Which kernel multiplies `x [rows, in]` by a weight (`PackedWeight.kernel_for`):

* **"cpp"**, fp32, 1-16 rows (a decode step), on a CPU with AVX-512 where the C++
  kernels build: `matmul_few_rows` (`csrc/matmul.cpp`) reads the weight from panels
  of 16 output columns, each one contiguous stream, prefetched ahead;
* **"onednn"**, more rows (a prefill chunk), and bf16 at every row count: oneDNN's
  kernel on its own blocked copy of the weight (AMX in bf16).

Where the C++ kernel is not used (another CPU, no compiler, `few_rows=False`), the
choices measured before it hold, on Intel CPUs in fp32:

* a product with only one to three rows is a matrix-*vector* product, limited by how
  fast the weights stream in, and MKL's gemv behind `F.linear` is the faster reader —
  so such a call skips the packed copy;
* a product with exactly the engine's full decode batch of rows (`max_num_seqs`) goes
  through a third copy, packed by MKL itself for exactly that many rows: MKL's packed
  GEMM is faster there than oneDNN's, and its call is cheaper. Its results are
  `F.linear`'s to the bit.

On the AMD CPUs measured, MKL's gemv was slower than the packed kernel at one to three
rows, so there every row count takes the oneDNN copy.

`PackedLinear` replaces an `nn.Linear` (sharing its weight and bias); `linear` is the
function it calls. Off the CPU, or without oneDNN, every call is plain `F.linear`.
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from minillm_cpu import kernels as cpu_kernels


@cache
def cpu_vendor() -> str:
    """The CPU's maker as the CPU names itself ("GenuineIntel", "AuthenticAMD", ...),
    or "" where that cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "GenuineIntel" if "GenuineIntel" in platform.processor() else ""


@cache
def cpu_has_avx512() -> bool:
    """Whether the CPU has AVX-512 (the vectors `matmul_few_rows` is written for: with
    narrower ones, its 16 rows of accumulators would not fit in registers)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return "avx512f" in flags.split()


def few_rows_kernels(weight: torch.Tensor, any_cpu: bool = False):
    """The C++ kernels, if `matmul_few_rows` should multiply by this weight here (fp32,
    the kernels built, and a CPU with AVX-512 — the one it is written for — unless
    `any_cpu`: it computes the same on any CPU, slower), else None."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return None
    if not (any_cpu or cpu_has_avx512()):
        return None
    try:
        return cpu_kernels.load()                       # compiles on first use
    except cpu_kernels.CpuKernelsUnavailable:
        return None


class PackedWeight:
    """Copies of a weight matrix [out, in] in the layouts of faster kernels.

    `data`: oneDNN's blocked ("packed") layout, tiles matching its AVX-512 (or AMX)
    kernels, for any number of rows. Same products as `F.linear`, different summation
    order: results agree to float rounding.

    `panels`: in fp32 where the C++ kernels run (`few_rows`: None = on AVX-512 CPUs,
    False = never, True = on any CPU, e.g. to test them), the weight in panels of 16
    output columns for `matmul_few_rows`, which takes every product of 1-16 rows
    (`FEW_ROWS`).

    Without panels, on an Intel CPU in fp32, given `full_batch` (the engine's
    `max_num_seqs`), it keeps `mkl` instead: the weight packed by MKL for products of
    exactly `full_batch` rows (`mkl_rows`; PyTorch's `mkl._mkl_linear` uses such a copy
    only at that row count).

    The copy remembers which tensor it was made from: if the weight is replaced or
    modified in place, `matches` turns False and `linear` falls back to `F.linear`.
    """

    ROWS_HINT = 16          # oneDNN picks the tiling for about this many rows
    # On an Intel CPU, fewer rows than this go to F.linear: fp32 at 1-3 rows is memory
    # bound, and there MKL's gemv reads the weights faster than the packed kernel; in
    # bf16 the packed kernel (AMX) wins at every row count. On AMD CPUs MKL's gemv was
    # *slower* than the packed kernel, so every row count is packed
    # (docs/performance.md, change 5).
    MIN_ROWS_ON_INTEL = {torch.float32: 4, torch.bfloat16: 1}
    FEW_ROWS = range(1, cpu_kernels.MATMUL_MAX_ROWS + 1)   # what `matmul_few_rows` takes

    def __init__(self, weight: torch.Tensor, vendor: str | None = None,
                 full_batch: int | None = None, few_rows: bool | None = None):
        vendor = cpu_vendor() if vendor is None else vendor
        self.source = _identity(weight)
        self.min_rows = self.min_rows_for(weight.dtype, vendor)
        self.data = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), self.ROWS_HINT)
        self.kernels = (few_rows_kernels(weight, any_cpu=bool(few_rows))
                        if few_rows is not False else None)
        if few_rows and self.kernels is None:
            raise ValueError("few_rows=True needs a float32 weight on a CPU where the C++ "
                             "kernels build; pass few_rows=None to use them only where "
                             "they are fast (AVX-512)")
        self.panels = None if self.kernels is None else self.kernels.pack_panels(weight)
        self.mkl_rows = (0 if self.panels is not None                     # 0: no MKL copy
                         else self.mkl_rows_for(weight, vendor, full_batch))
        self.mkl = (torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), self.mkl_rows)
                    if self.mkl_rows else None)

    def matches(self, weight: torch.Tensor) -> bool:
        return _identity(weight) == self.source

    def kernel_for(self, x: torch.Tensor, weight: torch.Tensor) -> str:
        """Which kernel computes `x @ weight.T`: "cpp" (1-16 fp32 rows, with panels),
        "mkl" (exactly `mkl_rows` rows), "onednn" (at least `min_rows` rows), or
        "F.linear" (fewer rows, a weight that is no longer the one packed, or a product
        autograd must see)."""
        if not self.matches(weight):
            return "F.linear"
        rows = x.shape[0]
        if self.panels is not None and rows in self.FEW_ROWS and x.dtype == torch.float32:
            needs_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
            return "F.linear" if needs_grad else "cpp"
        if self.mkl_rows and rows == self.mkl_rows:
            return "mkl"
        return "onednn" if rows >= self.min_rows else "F.linear"

    @classmethod
    def min_rows_for(cls, dtype: torch.dtype, vendor: str) -> int:
        """The fewest rows the packed copy serves, on a CPU of this maker."""
        return cls.MIN_ROWS_ON_INTEL[dtype] if vendor == "GenuineIntel" else 1

    @classmethod
    def mkl_rows_for(cls, weight: torch.Tensor, vendor: str, full_batch: int | None) -> int:
        """The row count the MKL copy is packed for: the full batch, where it is worth a
        copy (Intel, fp32, MKL present, more rows than go to `F.linear` anyway); else 0."""
        worth_it = (full_batch is not None and vendor == "GenuineIntel"
                    and weight.dtype == torch.float32 and torch.backends.mkl.is_available()
                    and full_batch >= cls.min_rows_for(weight.dtype, vendor))
        return full_batch if worth_it else 0

    @staticmethod
    def supported(weight: torch.Tensor) -> bool:
        """Whether oneDNN can pack this weight here (fp32; bf16 only on a CPU with the
        bf16 instructions oneDNN's packed kernels need: AVX-512 or AVX-NE-CONVERT)."""
        if weight.device.type != "cpu" or weight.dtype not in (torch.float32, torch.bfloat16):
            return False
        if not (torch.backends.mkldnn.is_available()
                and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
            return False
        return weight.dtype == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _identity(weight: torch.Tensor) -> tuple:
    return weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           packed: PackedWeight | None = None) -> torch.Tensor:
    """x [T, in] @ weight[out, in]ᵀ (+ bias) → [T, out], by the kernel the packed copy
    picks (`PackedWeight.kernel_for`)."""
    kernel = "F.linear" if packed is None else packed.kernel_for(x, weight)
    if kernel == "cpp":
        return packed.kernels.matmul_few_rows(x, packed.panels, weight.shape[0], bias)
    if kernel == "mkl":
        return torch.ops.mkl._mkl_linear(x, packed.mkl, weight, bias, x.shape[0])
    if kernel == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x, packed.data, bias, "none", [], "")
    return F.linear(x, weight, bias)


class PackedLinear(nn.Module):
    """An `nn.Linear` with its weight packed (`PackedWeight`): the same parameters,
    multiplied by whichever kernel `PackedWeight.kernel_for` picks."""

    def __init__(self, linear: nn.Linear, full_batch: int | None = None,
                 few_rows: bool | None = None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias          # shared, not copied
        self.packed = (PackedWeight(self.weight, full_batch=full_batch, few_rows=few_rows)
                       if PackedWeight.supported(self.weight) else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.packed)

    def extra_repr(self) -> str:
        kinds = "none" if self.packed is None else (
            "panels" if self.packed.panels is not None else "onednn")
        return f"in_features={self.in_features}, out_features={self.out_features}, packed={kinds}"
