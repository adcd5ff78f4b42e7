"""The "cpp" attention backend: paged attention in one C++ call a layer.

The "torch" and "sparse" backends plan index tensors every step, copy or index K/V
blocks, and make a dozen PyTorch calls a layer. This one calls `csrc/paged_attention.cpp`
once a layer: it writes the step's new K/V into their slots and attends every query row
over its own sequence's blocks, in place — no gather, no mask. Each row loops over
exactly the keys it may see (causal), so decodes of any mix of lengths need no grouping
and no padding.

One exception: a long prefill chunk. The kernel gives each query row its own pass over
the keys, which is right for decodes (one row a sequence) and short prompts, but a
chunk of hundreds of queries over hundreds of keys is a matrix product that
`scaled_dot_product_attention` tiles far better (docs/performance.md, change 12). So the
step's plan lists the chunks (more than one query) with more than `max_pairs`
(query, key) pairs; the torch backend's `PrefillGroup` attends those over the same
cache, which the kernel has already written, and their rows are put into the output.
"""

from __future__ import annotations

from typing import NamedTuple

from minillm.attention.base import AttentionBackend
from minillm.attention.torch_paged import PrefillGroup
from minillm.model.batch import AttentionMetadata
from minillm_cpu.kernels import CpuKernelsUnavailable, load

# A prefill chunk with more (query, key) pairs than this goes to SDPA: a conservative
# choice below where the two measured the same (docs/performance.md, change 12).
MAX_PAIRS_IN_KERNEL = 4096


class CppPlan(NamedTuple):
    """A step's plan: the long prefill chunks that SDPA attends (None: there are none)."""

    long_chunks: PrefillGroup | None


class CppAttention(AttentionBackend):
    """Paged attention by the C++ kernel (see module docstring)."""

    name = "cpp"

    def __init__(self, max_pairs: int = MAX_PAIRS_IN_KERNEL):
        try:
            self.kernels = load()
        except CpuKernelsUnavailable as err:
            raise ValueError(f"attention_backend='cpp' cannot run here: {err}. Use "
                             "attention_backend='sparse' (plain PyTorch) instead.") from None
        self.max_pairs = max_pairs

    def unavailable_reason(self, device, dtype, model_config) -> str | None:
        """The "cpu" executor's conditions: a CPU, and a dtype and head shape built."""
        from minillm_cpu.executor import CpuExecutor
        return CpuExecutor().unavailable_reason(device, dtype, model_config)

    def plan(self, meta: AttentionMetadata) -> CppPlan:
        """The prefill chunks the kernel leaves out (query_len · seq_len > max_pairs)."""
        ids = [b for b, (n, length) in enumerate(zip(meta.query_lens, meta.seq_lens_list))
               if n > 1 and n * length > self.max_pairs]
        return CppPlan(PrefillGroup(meta, ids) if ids else None)

    def attend(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, plan: CppPlan,
               scale: float):
        out = self.kernels.paged_attention(q, k, v, k_cache, v_cache, meta, scale,
                                           self.max_pairs)                # [T, Hq, D]
        long = plan.long_chunks
        if long is not None:
            out.index_copy_(0, long.rows, long.attend(q, k_cache, v_cache, scale).to(out.dtype))
        return out
