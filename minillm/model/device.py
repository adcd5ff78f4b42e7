"""Where the engine runs and in which number format: `resolve_device`, `resolve_dtype`.

    resolve_device(None)               cuda when torch sees a GPU, else cpu
    resolve_dtype(None, cpu)           float32
    resolve_dtype(None, cuda)          bfloat16 on a GPU that computes in it (compute
                                       capability 8.0 or more: A100, RTX 30xx/40xx, H100),
                                       float16 on an older one (T4, V100, RTX 20xx), with a
                                       warning that says why
    resolve_dtype(torch.float16, ...)  an explicit choice wins, unless the GPU cannot do it

Why 16-bit on a GPU at all: a decode step reads every weight once, so its time is
mostly bytes over memory bandwidth, and 2-byte weights halve the bytes of 4-byte ones.
Why bf16 first: it keeps float32's exponent range (up to ~3e38) with fewer digits, so
activations never overflow; fp16 keeps more digits (11 bits against 8) but stops at
65504. Why not bf16 everywhere: only GPUs of compute capability 8.0 (Ampere) and newer
have bf16 arithmetic units. On an older card torch may emulate some bf16 operations
(`torch.cuda.is_bf16_supported()` then still says True, counting the emulation), but
Triton cannot build bf16 `tl.dot` for it. So the default asks the hardware
(`torch.cuda.get_device_capability`), not that function.

On CPU the default is float32: CPU matrix units gain little from 16-bit formats, and
float32 is what the correctness checks compare against transformers in.

If a model overflows in fp16 (inf or NaN logits), run it in float32 (`dtype="float32"`).
"""

from __future__ import annotations

import warnings

import torch

# The engine's number formats, by name (what EngineConfig and the command lines made
# from it accept); "float" and "half" are PyTorch's (and vLLM's) other names for two of them.
DTYPES = {"float32": torch.float32, "float": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16, "half": torch.float16}
BF16_MIN_CAPABILITY = (8, 0)  # Ampere: the first GPUs with bf16 arithmetic


def resolve_device(device: str | torch.device | None) -> torch.device:
    """CUDA when available, CPU otherwise; an explicit argument wins."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch sees no CUDA GPU; use 'cpu'")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {str(device)!r}")
    return device


def gpu_has_bf16(device: torch.device) -> bool:
    """Does this CUDA GPU have bf16 arithmetic (compute capability >= 8.0)?"""
    return torch.cuda.get_device_capability(device) >= BF16_MIN_CAPABILITY


def describe_gpu(device: torch.device) -> str:
    """'Tesla T4 (compute capability 7.5)': what a message about the GPU should name."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    """The engine's dtype on `device`: `dtype` if given, else the best default.

    `dtype` is None or "auto" (choose), a torch dtype, or its name ("float32",
    "float16", "bfloat16"). The default is float32 on CPU; on CUDA bfloat16 where the
    GPU has it and float16 (with a warning naming the GPU) where it does not. Asking
    for bfloat16 on such a GPU is a ValueError that says to use float16.
    """
    device = torch.device(device)
    if dtype is None or dtype == "auto":
        return _default_dtype(device)
    chosen = _as_dtype(dtype)
    if chosen is torch.bfloat16 and device.type == "cuda" and not gpu_has_bf16(device):
        raise ValueError(f"dtype=bfloat16 needs a GPU of compute capability 8.0 or more; "
                         f"{describe_gpu(device)} has no bf16 arithmetic. Use "
                         f"dtype='float16' (or leave dtype unset to get it).")
    return chosen


def _default_dtype(device: torch.device) -> torch.dtype:
    if device.type != "cuda":
        return torch.float32
    if gpu_has_bf16(device):
        return torch.bfloat16
    warnings.warn(f"{describe_gpu(device)} has no bf16 arithmetic (it needs compute "
                  f"capability 8.0), so minillm runs in float16 instead. Pass "
                  f"dtype='float32' if the model overflows in float16.", stacklevel=3)
    return torch.float16


def _as_dtype(dtype) -> torch.dtype:
    """A torch dtype from a torch dtype or its name; a ValueError for anything else."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    raise ValueError(f"dtype must be None, 'auto', one of {tuple(DTYPES)} or the matching "
                     f"torch dtype, got {dtype!r}")


def dtype_name(dtype) -> str | None:
    """'float32' | 'bfloat16' | 'float16' for a dtype given as a name or a torch dtype
    (None for anything else)."""
    try:
        return str(_as_dtype(dtype)).removeprefix("torch.")
    except ValueError:
        return None
