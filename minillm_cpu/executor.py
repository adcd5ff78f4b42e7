"""The "cpu" executor: the readable model with its modules swapped for C++ ones at load time.

`load(model, config)` takes the model `minillm/model/llama.py` built and, once:

* tunes glibc's allocator for a process that runs engine steps (`malloc.py`);
* swaps modules for ones of the same meaning (`modules.py`, `packed_linear.py`):
  every `nn.Linear` → `PackedLinear`, `RMSNorm` → `CppRMSNorm`, `SiluAndMul` →
  `CppSiluAndMul`, `RotaryEmbedding` → `CppRotaryEmbedding`;
* puts a `FusedDecoderStack` in place of the layer stack (`fused_stack.py`), which runs
  a small fp32 step's layers in one C++ call.

Its attention backend is "cpp" (`cpp_attention.py`). It runs where the kernels compile
and the model's shapes and dtype are ones they have instances for; elsewhere
`executor="auto"` falls back to the readable model ("eager").
"""

from __future__ import annotations

import torch
from torch import nn

from minillm.model.executor import Executor
from minillm.model.llama import RMSNorm, RotaryEmbedding, SiluAndMul, head_dim
from minillm_cpu import kernels as cpu_kernels
from minillm_cpu.fused_stack import FusedDecoderStack
from minillm_cpu.malloc import keep_freed_memory, release_freed_memory
from minillm_cpu.modules import CppRMSNorm, CppRotaryEmbedding, CppSiluAndMul
from minillm_cpu.packed_linear import PackedLinear


class CpuExecutor(Executor):
    name = "cpu"

    def unavailable_reason(self, device: torch.device, dtype: torch.dtype,
                           model_config) -> str | None:
        if device.type != "cpu":
            return f"it runs on the CPU, and this engine runs on {device}"
        reason = cpu_kernels.CpuKernels.unsupported(
            dtype, model_config.num_attention_heads, model_config.num_key_value_heads,
            head_dim(model_config))
        return reason or cpu_kernels.unavailable_reason()

    def attention_backend(self, device: torch.device, dtype: torch.dtype) -> str:
        return "cpp"

    def load(self, model, config):
        keep_freed_memory()         # reuse freed tensor memory: fewer page faults a step
        release_freed_memory()      # ...but give back what engines freed before it kept
        swap_modules(model, cpu_kernels.load(), full_batch=config.max_num_seqs)
        return model


def swap_modules(model: nn.Module, kernels: cpu_kernels.CpuKernels,
                 full_batch: int | None = None, few_rows: bool | None = None) -> nn.Module:
    """Swap `model`'s modules for the C++ ones in place (see the module docstring).
    `full_batch`, `few_rows`: how `PackedLinear` packs (`packed_linear.py`)."""
    for name, module in list(model.named_modules()):
        replacement = _replacement(module, kernels, full_batch, few_rows)
        if replacement is not None:
            model.set_submodule(name, replacement)
    model.layers = FusedDecoderStack(model.layers, kernels)
    return model


def _replacement(module: nn.Module, kernels, full_batch, few_rows) -> nn.Module | None:
    kind = type(module)
    if kind is nn.Linear:
        return PackedLinear(module, full_batch, few_rows)
    if kind is RMSNorm:
        return CppRMSNorm(module, kernels)
    if kind is SiluAndMul:
        return CppSiluAndMul(kernels)
    if kind is RotaryEmbedding:
        return CppRotaryEmbedding(module, kernels)
    return None
