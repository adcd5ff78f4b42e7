"""Drop-in modules: each computes what a module of the readable model computes, in C++.

The executor (`executor.py`) swaps them in when the model is loaded; the readable
`DecoderLayer` then calls them exactly as it calls the originals:

    RMSNorm          → CppRMSNorm          one loop a call (`add_rms_norm` with nothing to add)
    SiluAndMul       → CppSiluAndMul       one loop: SiLU(gate) · up
    RotaryEmbedding  → CppRotaryEmbedding  its `Rotation` rotates q and k in place
    nn.Linear        → PackedLinear        (`packed_linear.py`)

Each keeps the original's parameters (the same tensors), so a checkpoint, `.to()` and
the fused stack (`fused_stack.py`) see one set of weights.
"""

from __future__ import annotations

import torch
from torch import nn

from minillm.model.llama import RMSNorm, Rotation, RotaryEmbedding
from minillm_cpu.kernels import CpuKernels


class CppRMSNorm(nn.Module):
    def __init__(self, norm: RMSNorm, kernels: CpuKernels):
        super().__init__()
        self.weight, self.eps, self.kernels = norm.weight, norm.eps, kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:              # [T, H] → [T, H]
        return self.kernels.add_rms_norm(None, x.contiguous(), self.weight, self.eps)[0]


class CppSiluAndMul(nn.Module):
    def __init__(self, kernels: CpuKernels):
        super().__init__()
        self.kernels = kernels

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:        # [T, 2·I] → [T, I]
        return self.kernels.silu_and_mul(gate_up)


class CppRotation(Rotation):
    """`Rotation`, done in place by one C++ loop (x must have contiguous heads)."""

    def __init__(self, cos, sin_signed, kernels: CpuKernels):
        super().__init__(cos, sin_signed)
        self.kernels = kernels

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.rope_(x, self.cos, self.sin_signed)


class CppRotaryEmbedding(nn.Module):
    """The readable model's tables, handing out `CppRotation`s."""

    def __init__(self, rotary: RotaryEmbedding, kernels: CpuKernels):
        super().__init__()
        self.rotary, self.kernels = rotary, kernels

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> CppRotation:
        rope = self.rotary(positions, dtype)
        return CppRotation(rope.cos, rope.sin_signed, self.kernels)
