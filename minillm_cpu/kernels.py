"""The C++ kernels' Python side: compile once (`build.py`), then one checked call each.

On a CPU, PyTorch runs every op of the readable forward as its own call: a batch-16
decode step of SmolLM2 makes well over a thousand of them, and the ones between the
matmuls each touch a few kilobytes, so their cost is mostly the call itself. These
kernels (`csrc/`) do the same arithmetic in a few loops:

    paged_attention   write the new K/V into the cache, then attend every decode row and
                      short prefill chunk over its blocks where they lie (paged_attention.cpp)
    add_rms_norm      the residual add and the next RMSNorm            (elementwise.cpp)
    rope_             RoPE on queries and keys, in place               (elementwise.cpp)
    silu_and_mul      SiLU(gate) · up                                  (elementwise.cpp)
    matmul_few_rows   fp32 x [1-16 rows] @ Wᵀ, W packed into panels    (matmul.cpp)

`decoder_layer.cpp` adds no arithmetic: it makes every layer's calls of the kernels
above from C++ for a step of 1-16 fp32 rows (`fused_stack.py`). The tests hold each
kernel to the PyTorch formula it replaces; `docs/performance.md` says what they buy.

They are compiled on first use by the machine's C++ compiler (`build.py`, cached per
CPU) and called through `ctypes` with raw pointers: plain C++ with no PyTorch headers,
so a learner can read them without knowing PyTorch's C++ API.

    kernels = load()          # CpuKernelsUnavailable (with the reason) if they cannot build
    kernels.build_seconds     # what this process spent compiling (0.0: from the cache)
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

from minillm_cpu.build import BuildError, build_library

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
HEAD_DIMS = (8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256)   # paged_attention.cpp's instances

_P, _I64, _INT, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_SIGNATURES = {     # entry point (without the dtype suffix): argument types
    "minillm_paged_attention": [_P, _I64, _P, _P, _I64, _P, _P, _P, _P, _I64, _P, _P, _I64,
                                _I64, _P, _I64, _I64, _I64, _I64, _F32, _INT],
    "minillm_add_rms_norm": [_P, _P, _P, _P, _I64, _I64, _F32, _INT],
    "minillm_rope": [_P, _I64, _I64, _I64, _I64, _P, _P, _INT],
    "minillm_silu_and_mul": [_P, _P, _I64, _I64, _INT],
}
MATMUL_PANEL = 16               # matmul.cpp: output columns per panel
MATMUL_MAX_ROWS = 16            # matmul.cpp: the most rows `matmul_few_rows` multiplies


class CpuKernelsUnavailable(RuntimeError):
    """The C++ kernels cannot run here; the message says why and what to do."""


@cache
def load() -> "CpuKernels":
    """The kernels, compiled (or taken from the cache) once per process."""
    try:
        path, seconds = build_library()
        library = ctypes.CDLL(str(path))
    except (BuildError, OSError) as err:
        raise CpuKernelsUnavailable(str(err)) from err
    return CpuKernels(library, path, seconds)


def unavailable_reason() -> str | None:
    """None when `load()` works, else why it does not."""
    try:
        load()
    except CpuKernelsUnavailable as err:
        return str(err)
    return None


def openmp_runtimes() -> list[str]:
    """The OpenMP runtime libraries mapped into this process (one, if all is well)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    names = ("libgomp", "libiomp", "libomp")
    return sorted({line.split()[-1] for line in maps if any(n in line.split()[-1] for n in names)})


class CpuKernels:
    """Python's side of the library: each method checks the layout, then makes one call."""

    def __init__(self, library: ctypes.CDLL, path: Path, build_seconds: float):
        self.path, self.build_seconds = path, build_seconds
        self._entry = {}
        for name, argtypes in _SIGNATURES.items():
            for dtype, suffix in DTYPE_NAMES.items():
                fn = getattr(library, f"{name}_{suffix}")
                fn.argtypes = argtypes
                fn.restype = ctypes.c_int if name == "minillm_paged_attention" else None
                self._entry[name, dtype] = fn
        self._matmul = library.minillm_matmul_few_rows          # float32 only
        self._matmul.argtypes = [_P, _P, _P, _P, _I64, _I64, _I64, _INT]
        self._matmul.restype = ctypes.c_int
        self.decoder_layers_entry = library.minillm_decoder_layers_float32  # fused_stack.py
        self.decoder_layers_entry.argtypes = [_P, _I64, _P, _P, _P, _P]
        self.decoder_layers_entry.restype = ctypes.c_int

    @staticmethod
    def unsupported(dtype: torch.dtype, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> str | None:
        """Why the kernels cannot run a model of these shapes (None: they can)."""
        if dtype not in DTYPE_NAMES:
            return f"the C++ kernels compute in {tuple(map(str, DTYPE_NAMES))}, not {dtype}"
        if head_dim not in HEAD_DIMS:
            return f"the C++ attention kernel is built for head sizes {HEAD_DIMS}, not {head_dim}"
        if num_heads % num_kv_heads:
            return (f"the C++ attention kernel needs num_heads a multiple of num_kv_heads; "
                    f"got {num_heads} and {num_kv_heads}")
        return None

    def _call(self, name: str, dtype: torch.dtype):
        try:
            return self._entry[name, dtype]
        except KeyError:
            raise TypeError(f"{name}: the C++ kernels take {tuple(map(str, DTYPE_NAMES))}, "
                            f"got {dtype}") from None

    def paged_attention(self, q, k, v, k_cache, v_cache, meta, scale: float,
                        max_pairs: int) -> torch.Tensor:
        """Write k, v [T, Hkv, D] at `meta.slot_mapping`, then attend q [T, Hq, D] →
        out [T, Hq, D]. Prefill chunks whose query_len · seq_len exceeds `max_pairs` are
        written but not attended: their rows of `out` are left for the caller."""
        T, num_heads, head_dim = q.shape
        num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
        q, k, v = (_rows_of_heads(x) for x in (q, k, v))
        if k.stride(0) != v.stride(0):
            k, v = k.contiguous(), v.contiguous()
        if not (k_cache.dtype == v_cache.dtype == q.dtype == k.dtype == v.dtype):
            raise TypeError(f"cpp attention needs q, k, v and the KV cache in one dtype; got "
                            f"{q.dtype}, {k.dtype}, {v.dtype}, {k_cache.dtype}, {v_cache.dtype}")
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            raise ValueError("cpp attention needs a contiguous KV cache [blocks, block_size, Hkv, D]")
        out = torch.empty(T, num_heads, head_dim, dtype=q.dtype)
        tables = meta.block_tables
        failed = self._call("minillm_paged_attention", q.dtype)(
            q.data_ptr(), q.stride(0), k.data_ptr(), v.data_ptr(), k.stride(0),
            meta.slot_mapping.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
            tables.data_ptr(), tables.stride(0), meta.query_start_loc.data_ptr(),
            meta.seq_lens.data_ptr(), meta.num_seqs, max_pairs, out.data_ptr(), num_heads,
            num_kv_heads, head_dim, block_size, scale, torch.get_num_threads())
        if failed:
            raise ValueError(self.unsupported(q.dtype, num_heads, num_kv_heads, head_dim)
                             or "the C++ attention kernel rejected its arguments")
        return out

    def add_rms_norm(self, x, residual, weight, eps: float):
        """(RMSNorm(residual + x) · weight, residual + x), both [rows, H]; the sum is
        written into `residual` itself. x=None: no add (the first layer)."""
        if x is not None and (x.shape != residual.shape or not x.is_contiguous()):
            x = x.reshape(residual.shape).contiguous()
        if not residual.is_contiguous():
            raise ValueError("add_rms_norm updates residual in place: it must be contiguous")
        out = torch.empty_like(residual)
        rows, H = residual.shape
        self._call("minillm_add_rms_norm", residual.dtype)(
            None if x is None else x.data_ptr(), residual.data_ptr(), weight.data_ptr(),
            out.data_ptr(), rows, H, eps, torch.get_num_threads())
        return out, residual

    def rope_(self, x, cos, sin_signed) -> torch.Tensor:
        """x [T, heads, D] rotated in place by cos, sin_signed [T, 1, D] (the readable
        model's `Rotation`); returns x."""
        T, heads, D = x.shape
        if x.stride(2) != 1 or x.stride(1) != D or D % 2:
            raise ValueError(f"rope_ needs [T, heads, D] rows with contiguous heads and an even "
                             f"D; got shape {tuple(x.shape)}, strides {x.stride()}")
        cos, sin_signed = cos.contiguous(), sin_signed.contiguous()
        self._call("minillm_rope", x.dtype)(x.data_ptr(), x.stride(0), T, heads, D,
                                            cos.data_ptr(), sin_signed.data_ptr(),
                                            torch.get_num_threads())
        return x

    def silu_and_mul(self, gate_up) -> torch.Tensor:
        """gate_up [rows, 2·I] (gate | up) → SiLU(gate) · up [rows, I]."""
        gate_up = gate_up.contiguous()
        rows, width = gate_up.shape
        out = torch.empty(rows, width // 2, dtype=gate_up.dtype)
        self._call("minillm_silu_and_mul", gate_up.dtype)(gate_up.data_ptr(), out.data_ptr(),
                                                         rows, width // 2, torch.get_num_threads())
        return out

    @staticmethod
    def pack_panels(weight: torch.Tensor) -> torch.Tensor:
        """weight [N, K] fp32 → panels [ceil(N/16), K, 16] for `matmul_few_rows`: panel p
        holds output columns 16p..16p+15, one k after another (zeros past N)."""
        if weight.dtype != torch.float32 or weight.dim() != 2:
            raise TypeError(f"pack_panels takes a 2-D float32 weight, got {weight.dtype} "
                            f"{tuple(weight.shape)}")
        N, K = weight.shape
        num_panels = -(-N // MATMUL_PANEL)
        padded = torch.zeros(num_panels * MATMUL_PANEL, K, dtype=weight.dtype)
        padded[:N] = weight.detach()
        return padded.view(num_panels, MATMUL_PANEL, K).transpose(1, 2).contiguous()

    def matmul_few_rows(self, x: torch.Tensor, panels: torch.Tensor, out_features: int,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
        """x [M, K] @ Wᵀ (+ bias) → [M, out_features], for 1 <= M <= 16 rows of fp32,
        W given as its `pack_panels`."""
        M, K = x.shape
        if (x.dtype != torch.float32 or not 1 <= M <= MATMUL_MAX_ROWS
                or panels.shape != (-(-out_features // MATMUL_PANEL), K, MATMUL_PANEL)):
            raise ValueError(f"matmul_few_rows multiplies 1-{MATMUL_MAX_ROWS} float32 rows by "
                             f"panels of the same K; got x {x.dtype} {tuple(x.shape)}, panels "
                             f"{tuple(panels.shape)} for {out_features} outputs")
        x = x.contiguous()
        if bias is not None:
            bias = bias.detach().to(torch.float32).contiguous()
        y = torch.empty(M, out_features, dtype=torch.float32)
        self._matmul(x.data_ptr(), panels.data_ptr(), None if bias is None else bias.data_ptr(),
                     y.data_ptr(), M, out_features, K, torch.get_num_threads())
        return y


def _rows_of_heads(x: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D] with each row's heads side by side (a row of a fused QKV output
    qualifies), else a contiguous copy."""
    D = x.shape[2]
    return x if x.stride(2) == 1 and x.stride(1) == D else x.contiguous()


__all__ = ["CpuKernels", "CpuKernelsUnavailable", "HEAD_DIMS", "MATMUL_MAX_ROWS", "load",
           "openmp_runtimes", "unavailable_reason"]
