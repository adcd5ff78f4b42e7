"""The Triton attention backend: the engine's GPU path (see `kernels/`).

Per layer and step:

    store_kv                 write the new K/V rows at `slot_mapping`
    paged_decode_attention   when every sequence runs one token (a pure decode step):
                             q [B, Hq, D], one program per (sequence, KV head)
    paged_prefill_attention  otherwise: prefill chunks and decodes in ONE launch,
                             varlen + causal over the paged cache

On a CUDA machine the kernels compile for the GPU. On a CPU they run in Triton's
interpreter (`TRITON_INTERPRET=1`, set by `kernels` when no GPU is present): slow, but
the very same kernel code, which is how the tests check it without a GPU.
"""

from __future__ import annotations

from minillm.attention.base import AttentionBackend
from minillm.model.batch import AttentionMetadata


class TritonAttention(AttentionBackend):
    name = "triton"

    def __init__(self):
        from kernels import paged_decode_attention, paged_prefill_attention, store_kv
        self._store_kv = store_kv
        self._decode = paged_decode_attention
        self._prefill = paged_prefill_attention

    def attend(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, plan, scale: float):
        self._store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        if meta.all_decode:                  # T == B: one query row per sequence
            return self._decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)
        return self._prefill(q, k_cache, v_cache, meta.block_tables, meta.query_start_loc,
                             meta.seq_lens, scale)
