"""The "sparse" backend: decode attention that reads the paged cache in place.

The "torch" backend copies every decode group's K/V blocks out of the cache (a gather)
and then runs `scaled_dot_product_attention` on the copy. This backend skips the copy by
seeing decode attention as two products with a **sparse matrix** (稀疏矩阵) — a matrix
that stores only its non-zero entries and their column numbers:

* View one layer's cache as a table of rows: `K_rows = k_cache.view(-1, D)`, row
  `slot · Hkv + h` holding the key of token `slot` for K/V head `h` (same for V).
* Query head `i` of sequence `g` may look at the rows `slot · Hkv + h(i)` of its own
  sequence's slots. Put those column numbers in a sparse matrix `A` with one row per
  (sequence, query head): that *is* the block table, re-indexed.
* The scores are `Q · K_rowsᵀ`, but only where `A` has an entry: a
  *sampled* matrix product (SDDMM), `torch.sparse.sampled_addmm(A, Q, K_rows.T)`.
  It reads each key row where it lies; nothing is copied. It computes
  `beta · A + alpha · (Q · K_rowsᵀ at A's entries)`, so with A's values set to the mask
  (0 for a key the query may see, -inf for padding) and `beta=1` it adds the mask
  itself, and with `out=A` it writes the scores over A's values: no new tensor.
* softmax over each row's entries gives the weights `P` (same pattern as `A`).
* The output is `P · V_rows`: for each row, a weighted sum of the value rows it lists.
  That is exactly what `F.embedding_bag(cols, V_rows, per_sample_weights=P, mode="sum")`
  computes — an op made for recommendation models ("sum these table rows, weighted") —
  again reading the rows in place.

For example, a sequence of 20 tokens in blocks [7, 2] (block size 16) has slots
112 … 127 and 32 … 35; with 3 K/V heads its query heads of K/V head 1 list the rows
`slot · 3 + 1` = 337, 340, …, 106. Decodes are still cut into groups of similar length
(`torch_paged.split_by_length`, with the torch backend's cost of a group; a larger
cost — fewer, more padded groups — measured no faster: docs/performance.md): a row of `A`
is padded to its group's longest member, and the padding (the tail of the last block,
or block-table padding) gets -inf scores, so weight 0. The KV write and the prefill
chunks (queries that attend to each other causally) are the torch backend's, unchanged.

What reading in place saves, measured on the course machine: `docs/performance.md`
(change 6) and lesson 07 (section 6). PyTorch's CPU `sampled_addmm` has kernels for
float32 and float64 only, so in other dtypes (bfloat16) decode groups fall back to the
torch backend's gather + SDPA.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from minillm.attention.torch_paged import DecodeGroup, TorchAttention
from minillm.model.batch import AttentionMetadata

SPARSE_DTYPES = (torch.float32, torch.float64)     # what CPU sampled_addmm computes in


class SparseAttention(TorchAttention):
    """The torch backend, with decode groups attended in place (see module docstring)."""

    name = "sparse"

    def decode_group(self, meta: AttentionMetadata, seq_ids: list[int]):
        return SparseDecodeGroup(meta, seq_ids)


class SparseDecodeGroup(DecodeGroup):
    """G decodes whose attention is a sampled product and an embedding bag.

    From the torch backend's group it keeps the rows, the block ids (`[G·nb]`, the
    first nb blocks of each member) and the mask of keys past each member's end. Built
    at the first layer (which tells the head counts), reused by the others:

    * `cols` [G·Hq, L]: the cache row each query head reads at each position (also
      flat, `flat_cols`, with each row's start, `bag_starts`: the embedding bag's input);
    * `pattern`: the sparse matrix [G·Hq, slots·Hkv] with those columns; each layer
      writes its scores into the pattern's values, which start from
    * `mask_values` [G·Hq·L]: the additive mask of every entry (0 or -inf).
    """

    pattern: torch.Tensor | None = None

    def attend(self, q, k_cache, v_cache, scale: float) -> torch.Tensor:
        """q [T, Hq, D] (the whole step) → this group's outputs [G, Hq, D]."""
        if q.dtype not in SPARSE_DTYPES:
            return super().attend(q, k_cache, v_cache, scale)
        G, L = self.shape
        num_heads, head_dim = q.shape[1:]
        if self.pattern is None or self.pattern.dtype != q.dtype:
            self._index(num_heads, k_cache, q.dtype)
        q = self.queries(q)                                               # [G, Hq, D]
        k_rows = k_cache.view(-1, head_dim)                              # [slots·Hkv, D]
        v_rows = v_cache.view(-1, head_dim)
        scores = self.pattern.values()                                   # [G·Hq·L], shared
        scores.copy_(self.mask_values)                 # start from the mask: 0 or -inf
        torch.sparse.sampled_addmm(self.pattern, q.reshape(G * num_heads, head_dim), k_rows.t(),
                                   beta=1.0, alpha=scale, out=self.pattern)   # mask + q·k
        weights = scores.view(G * num_heads, L).softmax(-1)                # [G·Hq, L]
        out = F.embedding_bag(self.flat_cols, v_rows, self.bag_starts, mode="sum",
                              per_sample_weights=weights.view(-1))              # [G·Hq, D]
        return out.view(G, num_heads, head_dim)

    def _index(self, num_heads: int, k_cache: torch.Tensor, dtype: torch.dtype) -> None:
        """`cols` and `pattern` (in `dtype`) for `num_heads` query heads over this cache."""
        num_blocks, block_size, num_kv_heads, _ = k_cache.shape
        G, L = self.shape
        device = k_cache.device
        slots = (self.block_ids.view(G, -1, 1) * block_size
                 + torch.arange(block_size, device=device)).view(G, 1, L)     # [G, 1, L]
        kv_head = torch.arange(num_heads, device=device) // (num_heads // num_kv_heads)
        self.cols = (slots * num_kv_heads + kv_head.view(1, -1, 1)).view(G * num_heads, L)
        row_starts = torch.arange(0, G * num_heads * L + 1, L, device=device)   # L entries a row
        self.flat_cols, self.bag_starts = self.cols.view(-1), row_starts[:-1]   # the bags, flat
        self.mask_values = self.mask(dtype).view(G, 1, L).expand(G, num_heads, L).reshape(-1)
        with warnings.catch_warnings():     # PyTorch calls sparse CSR "beta" (once a process);
            warnings.simplefilter("ignore", UserWarning)    # what is used here is tested
            self.pattern = torch.sparse_csr_tensor(
                row_starts, self.cols.reshape(-1), self.mask_values.clone(),
                size=(G * num_heads, num_blocks * block_size * num_kv_heads), check_invariants=False)
