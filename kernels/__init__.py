"""Triton kernels for minillm's paged attention, each beside its PyTorch reference.

=============================  ===========================================  ==========================
kernel (Triton)                what it does                                 reference (PyTorch)
=============================  ===========================================  ==========================
`store_kv`                   write new K/V into cache slots               `store_kv_ref`
`paged_decode_attention`     1 query token per sequence, GQA              `paged_decode_attention_ref`
`paged_prefill_attention`    varlen causal: prefill chunks + decodes      `paged_prefill_attention_ref`
=============================  ===========================================  ==========================

Each pair has the same signature and returns the same numbers (up to float rounding).

On a machine without CUDA, importing this package sets `TRITON_INTERPRET=1` (unless
you set it yourself) *before* the kernels are defined: `@triton.jit` reads the
variable when it decorates a function, so it must be set first. The interpreter runs
each program of the grid one after another in Python/numpy on CPU tensors: slow, but
the same kernel source, so you can step through it, print from it and test it.

If Triton itself is missing (it ships for Linux only), the references still work and
calling a Triton kernel raises a `RuntimeError` explaining why.
"""

from __future__ import annotations

import os
import sys

import torch

# Was triton imported by someone else (e.g. transformers' model code) before the
# interpreter was switched on? Then triton.language's own @jit helpers were built for a
# GPU and the interpreter cannot call them: say so instead of failing deep inside.
_TRITON_IMPORTED_TOO_EARLY = "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ._checks import interpreter_enabled  # noqa: E402
from .reference import (  # noqa: E402
    paged_decode_attention_ref,
    paged_prefill_attention_ref,
    store_kv_ref,
)

try:
    import triton  # noqa: F401
except ImportError as error:  # e.g. macOS / Windows: no triton wheel
    _TRITON_IMPORT_ERROR: ImportError | None = error
else:
    _TRITON_IMPORT_ERROR = None

if _TRITON_IMPORT_ERROR is None and _TRITON_IMPORTED_TOO_EARLY and not torch.cuda.is_available():
    _TRITON_IMPORT_ERROR = ImportError(
        "triton was imported before TRITON_INTERPRET=1 was set, so the CPU interpreter "
        "cannot run; import minillm or kernels before transformers (minillm sets it), "
        "or export TRITON_INTERPRET=1 before starting Python")

if _TRITON_IMPORT_ERROR is None:
    from .paged_decode import paged_decode_attention  # noqa: E402
    from .paged_prefill import paged_prefill_attention  # noqa: E402
    from .store_kv import store_kv  # noqa: E402
else:

    def _missing(name):
        def kernel(*args, **kwargs):
            raise RuntimeError(
                f"{name} needs Triton, which could not be imported ({_TRITON_IMPORT_ERROR}). "
                f"Use {name}_ref (PyTorch) instead, or install triton (Linux)."
            )

        kernel.__name__ = name
        return kernel

    store_kv = _missing("store_kv")
    paged_decode_attention = _missing("paged_decode_attention")
    paged_prefill_attention = _missing("paged_prefill_attention")


def triton_available() -> bool:
    """True when the Triton kernels can run here: Triton imports and either a CUDA GPU
    is present or the interpreter (`TRITON_INTERPRET=1`, CPU tensors) is on."""
    return _TRITON_IMPORT_ERROR is None and (torch.cuda.is_available() or interpreter_enabled())


__all__ = [
    "store_kv",
    "paged_decode_attention",
    "paged_prefill_attention",
    "store_kv_ref",
    "paged_decode_attention_ref",
    "paged_prefill_attention_ref",
    "triton_available",
    "interpreter_enabled",
]
