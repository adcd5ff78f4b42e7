"""The "cpp" backend: paged attention in one C++ call a layer (default on CPU).

The "torch" and "sparse" backends plan index tensors every step, copy or index K/V
blocks, and make a dozen PyTorch calls a layer. This one calls
`minillm/cpu_kernels/paged_attention.cpp` once a layer: it writes the step's new K/V into
their slots and attends every query row over its own sequence's blocks, in place — no
gather, no mask, no plan. Each row loops over exactly the keys it may see (causal), so
decodes of any mix of lengths need no grouping and no padding.

One exception: a long prefill chunk. The kernel gives each query row its own pass over
the keys, which is right for decodes (one row a sequence) and short prompts, but a
chunk of hundreds of queries over hundreds of keys is a matrix product that
`scaled_dot_product_attention` tiles far better (measured: PERFORMANCE.md). A chunk (more
than one query) with more than `max_pairs` (query, key) pairs is therefore attended by the torch backend's
prefill group (`torch_paged._PrefillGroup`, over the same cache, which the kernel has
already written), and its rows are put into the output.

The backend also carries the other C++ kernels (`cpu_kernels`): `LlamaModel.forward`
sees them and runs the residual add + RMSNorm, RoPE and SiLU·up through them, so the
layers' element-wise chains are one call each too. And for a decode step (fp32, 1-16
rows) it offers `fused_layers`: all the layers' kernel calls made from C++ in one call
(`cpu_kernels/decoder_layer.py`), the same numbers with one return to Python a step
instead of 270; `CppAttention(fuse_layers=False)` keeps the calls one by one.
"""

from __future__ import annotations

import torch

from minillm.attention.torch_paged import _PrefillGroup
from minillm.cpu_kernels import CpuKernelsUnavailable, load
from minillm.cpu_kernels.decoder_layer import FusedDecoder, FusedLayers
from minillm.flat_batch import AttentionMetadata

# A prefill chunk with more (query, key) pairs than this goes to SDPA. A conservative
# choice: on the course machine the two cost the same somewhere between ~10,000 and
# 131,000 pairs (PERFORMANCE.md, change 12).
MAX_PAIRS_IN_KERNEL = 4096


class CppAttention:
    """Paged attention by the C++ kernel (see module docstring)."""

    name = "cpp"

    def __init__(self, max_pairs: int = MAX_PAIRS_IN_KERNEL, fuse_layers: bool = True):
        try:
            self.cpu_kernels = load()
        except CpuKernelsUnavailable as err:
            raise ValueError(f"attention_backend='cpp' cannot run here: {err}. Use "
                             "attention_backend='sparse' (plain PyTorch) instead.") from None
        self.max_pairs, self.fuse_layers = max_pairs, fuse_layers
        self.fused = FusedDecoder(self.cpu_kernels.decoder_layers_entry, max_pairs)

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float):
        if self.name not in meta.scratch:          # once per step: the long chunks, if any
            meta.scratch[self.name] = long_chunks(meta, self.max_pairs)
        out = self.cpu_kernels.paged_attention(q, k, v, k_cache, v_cache, meta, scale,
                                               self.max_pairs)        # [T, Hq, D]
        long = meta.scratch[self.name]
        if long is not None:
            out.index_copy_(0, long.rows, long.attend(q, k_cache, v_cache, scale).to(out.dtype))
        return out

    def fused_layers(self, model, kv_caches, meta: AttentionMetadata, rope,
                     h: torch.Tensor) -> FusedLayers | None:
        """The step's decoder layers in one C++ call (`cpu_kernels/decoder_layer.py`), or
        None: the step does not qualify, `fuse_layers` is off, or a prefill chunk is long
        enough for SDPA (the same once-a-step `long_chunks` that `__call__` uses)."""
        if not self.fuse_layers:
            return None
        if self.name not in meta.scratch:
            meta.scratch[self.name] = long_chunks(meta, self.max_pairs)
        if meta.scratch[self.name] is not None:
            return None
        return self.fused.for_step(model, kv_caches, meta, rope, h)


def long_chunks(meta: AttentionMetadata, max_pairs: int) -> _PrefillGroup | None:
    """The prefill chunks the kernel leaves out (query_len · seq_len > max_pairs), as one
    SDPA group; None when there are none."""
    ids = [b for b, (n, length) in enumerate(zip(meta.query_lens, meta.seq_lens_list))
           if n > 1 and n * length > max_pairs]
    return _PrefillGroup(meta, ids) if ids else None
