"""The "torch" backend: batched attention over the paged KV cache, in plain PyTorch.

Per step it plans index tensors once (`plan`, handed back to every layer), then per
layer writes the new K/V (`reference.write_kv`), gathers the sequences' K/V out of their
blocks — **one batched gather per group**, no Python loop over sequences — and runs
`scaled_dot_product_attention`. A group is padded to its longest member, so rows are
split into groups, and a long sequence does not pad every short one to its length:

* **decode rows** (one query each, by far the most common) are cut into groups of
  similar length (`split_by_length`: a group costs a few calls, padding costs gathered
  blocks; `docs/performance.md` measures what the grouping buys). Whole *blocks* are
  gathered (`index_select` of block ids — one copy of `block_size` token rows at a
  time) into `[G, Hkv, L, D]`; the query heads that share a K/V head are stacked as
  that head's "queries" (`[G, Hkv, Hq/Hkv, D]`), so GQA needs no copy of K/V per query
  head; the only mask hides the tail of each sequence's last block;
* **prefill rows** (chunks of n > 1 queries) form one group, whole blocks gathered the
  same way, queries padded to the longest chunk (a single chunk needs no padding), with
  a mask that is causal *and* offset (a chunk's first query sits at position
  `seq_len - query_len`, not 0).

The groups' outputs, end to end, are put back in the flat batch's row order. Attention
has no weights, so grouping rows loses no weight reuse: the expensive matmuls (QKV,
output projection, MLP) still see the whole flat batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minillm.attention.base import AttentionBackend
from minillm.attention.reference import write_kv
from minillm.model.batch import AttentionMetadata

# A group costs a few fixed-size calls per layer (gather K, gather V, attention, ...),
# worth about this many extra gathered KV blocks (docs/performance.md: how it was chosen).
GROUP_COST_IN_BLOCKS = 40


class TorchAttention(AttentionBackend):
    """Batched paged attention in plain PyTorch (see module docstring)."""

    name = "torch"

    def __init__(self, group_cost_in_blocks: int = GROUP_COST_IN_BLOCKS):
        self.group_cost = group_cost_in_blocks

    def plan(self, meta: AttentionMetadata) -> "GroupPlan":
        """The step's groups and their index tensors, built once for every layer."""
        return GroupPlan(meta, self.group_cost, self.decode_group)

    def attend(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, plan: "GroupPlan",
               scale: float):
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping, plan.all_slots_valid)
        outs = [group.attend(q, k_cache, v_cache, scale) for group in plan.groups]   # [rows_g, Hq, D]
        out = outs[0] if len(outs) == 1 else torch.cat(outs)                         # [T, Hq, D]
        return out if plan.row_order is None else out.index_select(0, plan.row_order)

    def decode_group(self, meta: AttentionMetadata, seq_ids: list[int]):
        """How this backend attends a group of decodes (the "sparse" backend overrides it)."""
        return DecodeGroup(meta, seq_ids)


class GroupPlan:
    """How this step's rows are split into groups, with every group's index tensors.

    Decode rows are sorted by length and cut into groups of similar length
    (`split_by_length`); prefill chunks form one more group. `row_order` maps the
    groups' outputs, laid end to end, back to the flat batch's row order.
    """

    def __init__(self, meta: AttentionMetadata, group_cost: int, decode_group):
        bs = meta.block_size
        decode_ids = [b for b, n in enumerate(meta.query_lens) if n == 1]
        prefill_ids = [b for b, n in enumerate(meta.query_lens) if n > 1]
        num_blocks = [-(-meta.seq_lens_list[b] // bs) for b in decode_ids]
        self.groups: list = [decode_group(meta, ids)
                             for ids in split_by_length(decode_ids, num_blocks, group_cost)]
        if prefill_ids:
            self.groups.append(PrefillGroup(meta, prefill_ids))
        rows = [r for g in self.groups for r in g.row_list]     # the groups' rows, end to end
        self.row_order = None                   # None: that is already the flat order
        if rows != list(range(len(rows))):      # the inverse permutation of `rows`
            self.row_order = torch.tensor(rows, device=meta.seq_lens.device).argsort()
        self.all_slots_valid = bool((meta.slot_mapping >= 0).all())


def split_by_length(ids: list[int], num_blocks: list[int], group_cost: int) -> list[list[int]]:
    """Cut sequences into groups that each attend as one padded batch.

    A group pads every member to its longest member, so its work is about
    `len(group) × max blocks`, plus a fixed `group_cost` (in blocks) for its extra
    calls. Sorted by length, the best cut is found by dynamic programming over the
    distinct block counts. Example (cost 40): eight short decodes of 2 blocks beside two
    long ones of 30 — one group costs 10·30 + 40 = 340 (the short ones padded to 30
    blocks), two groups cost 8·2 + 40 + 2·30 + 40 = 156. Similar lengths stay together.
    """
    if not ids:
        return []
    order = sorted(range(len(ids)), key=lambda i: num_blocks[i])
    widths = sorted(set(num_blocks))                   # candidate group widths, ascending
    upto = [sum(1 for n in num_blocks if n <= w) for w in widths]   # rows of width ≤ w
    best = [0.0] * (len(widths) + 1)                   # best[j]: cost of the first upto[j-1] rows
    cut = [0] * (len(widths) + 1)
    for j in range(1, len(widths) + 1):
        best[j], cut[j] = min((best[i] + (upto[j - 1] - (upto[i - 1] if i else 0)) * widths[j - 1]
                               + group_cost, i) for i in range(j))
    groups, j = [], len(widths)
    while j > 0:
        start, end = (upto[cut[j] - 1] if cut[j] else 0), upto[j - 1]
        groups.append(sorted(ids[i] for i in order[start:end]))   # members in batch order
        j = cut[j]
    return groups[::-1]


def gather_blocks(cache: torch.Tensor, block_ids: torch.Tensor, shape) -> torch.Tensor:
    """cache [N, bs, Hkv, D] → the listed blocks, end to end per sequence: [G, Hkv, L, D].

    Each block is one row of a 2-D view, so the copy moves whole blocks
    (bs · Hkv · D contiguous values) at a time.
    """
    G, L = shape
    rows = cache.view(cache.shape[0], -1).index_select(0, block_ids)     # [G·nb, bs·Hkv·D]
    return rows.view(G, L, *cache.shape[2:]).transpose(1, 2)            # [G, Hkv, L, D]


def _block_ids(meta: AttentionMetadata, seq_ids: list[int], num_blocks: int) -> torch.Tensor:
    """The first `num_blocks` block ids of each listed sequence, end to end: [G·nb]."""
    return meta.block_tables[seq_ids, :num_blocks].long().reshape(-1)


class MaskedGroup:
    """What every group shares: `hidden` [G, 1, q, L], True where a query must not see a
    key, turned into an additive mask (0 visible, -inf hidden) once per dtype — every
    layer of the step reuses it."""

    hidden: torch.Tensor

    def __init__(self, hidden: torch.Tensor):
        self.hidden = hidden
        self.masks: dict[torch.dtype, torch.Tensor] = {}

    def mask(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in self.masks:
            zeros = torch.zeros(self.hidden.shape, dtype=dtype, device=self.hidden.device)
            self.masks[dtype] = zeros.masked_fill(self.hidden, float("-inf"))
        return self.masks[dtype]


class DecodeGroup(MaskedGroup):
    """G sequences with one query each (see the module docstring)."""

    def __init__(self, meta: AttentionMetadata, seq_ids: list[int]):
        device = meta.seq_lens.device
        bs = meta.block_size
        starts = meta.query_start_loc.tolist()
        self.row_list = [starts[b] for b in seq_ids]
        lens = torch.tensor([meta.seq_lens_list[b] for b in seq_ids], device=device)
        num_blocks = -(-max(meta.seq_lens_list[b] for b in seq_ids) // bs)
        self.block_ids = _block_ids(meta, seq_ids, num_blocks)               # [G·nb]
        self.shape = (len(seq_ids), num_blocks * bs)                         # (G, L)
        # rows side by side (the usual case) are a slice of q: no copy needed
        first = self.row_list[0]
        self.row_slice = (slice(first, first + len(seq_ids))
                          if self.row_list == list(range(first, first + len(seq_ids))) else None)
        self.rows = None if self.row_slice else torch.tensor(self.row_list, device=device)   # [G]
        # keys at position >= seq_len (the tail of the last block, or padding blocks)
        # must get no weight: add -inf to their scores
        pos = torch.arange(num_blocks * bs, device=device)
        super().__init__((pos[None, :] >= lens[:, None])[:, None, None, :])   # [G, 1, 1, L]

    def queries(self, q: torch.Tensor) -> torch.Tensor:
        """This group's rows of the step's queries q [T, Hq, D] → [G, Hq, D]."""
        return q[self.row_slice] if self.row_slice else q.index_select(0, self.rows)

    def attend(self, q, k_cache, v_cache, scale: float) -> torch.Tensor:
        """q [T, Hq, D] (the whole step) → this group's outputs [G, Hq, D]."""
        return _attend_decode(self.queries(q), k_cache, v_cache, self, scale)


def _attend_decode(q, k_cache, v_cache, group: DecodeGroup, scale: float) -> torch.Tensor:
    """q [G, Hq, D], one query per sequence → [G, Hq, D]."""
    G, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    keys = gather_blocks(k_cache, group.block_ids, group.shape).to(q.dtype)     # [G, Hkv, L, D]
    values = gather_blocks(v_cache, group.block_ids, group.shape).to(q.dtype)
    # GQA: the Hq/Hkv query heads of one K/V head act as that head's queries
    q_grouped = q.reshape(G, num_kv_heads, num_heads // num_kv_heads, head_dim)
    o = F.scaled_dot_product_attention(q_grouped, keys, values, attn_mask=group.mask(q.dtype),
                                       scale=scale)               # [G, Hkv, Hq/Hkv, D]
    return o.reshape(G, num_heads, head_dim)


class PrefillGroup(MaskedGroup):
    """Prefill chunks (n > 1 queries each), attended as one batch padded to the longest.

    Keys come from whole blocks, as for decodes. The mask is causal *and* offset: a
    chunk's first query sits at position `seq_len - n`, not 0, and sees everything
    before it. A single chunk (the common case) needs no padding at all.
    """

    def __init__(self, meta: AttentionMetadata, seq_ids: list[int]):
        device = meta.seq_lens.device
        bs = meta.block_size
        q_lens = [meta.query_lens[b] for b in seq_ids]
        s_lens = [meta.seq_lens_list[b] for b in seq_ids]
        starts = meta.query_start_loc.tolist()
        max_q, num_blocks = max(q_lens), -(-max(s_lens) // bs)
        # which flat rows belong to this group, and where they go in the padded [G, max_q]
        self.row_list, pad_b, pad_i = [], [], []
        for g, b in enumerate(seq_ids):
            self.row_list.extend(range(starts[b], starts[b] + q_lens[g]))
            pad_b.extend([g] * q_lens[g])
            pad_i.extend(range(q_lens[g]))
        self.rows = torch.tensor(self.row_list, device=device)
        self.first_row = starts[seq_ids[0]]
        self.padded = len(seq_ids) > 1
        self.pad_b = torch.tensor(pad_b, device=device)
        self.pad_i = torch.tensor(pad_i, device=device)
        self.shape = (len(seq_ids), max_q)
        self.block_ids = _block_ids(meta, seq_ids, num_blocks)              # [G·nb]
        self.kv_shape = (len(seq_ids), num_blocks * bs)                      # (G, L)
        # key p hidden from query i iff p > its position seq_len - q_len + i  [G, 1, max_q, L]
        pos = torch.arange(num_blocks * bs, device=device)
        s = torch.tensor(s_lens, device=device)[:, None]
        n = torch.tensor(q_lens, device=device)[:, None]
        q_pos = s - n + torch.arange(max_q, device=device)[None, :]       # [G, max_q]
        super().__init__((pos[None, None, :] > q_pos[:, :, None])[:, None])

    def attend(self, q, k_cache, v_cache, scale: float) -> torch.Tensor:
        """q [T, Hq, D] (the whole step) → this group's rows [rows, Hq, D]."""
        G, max_q = self.shape
        if self.padded:
            q_pad = q.new_zeros(G, max_q, *q.shape[1:])                    # [G, max_q, Hq, D]
            q_pad[self.pad_b, self.pad_i] = q[self.rows]
        else:                                       # one chunk: its rows are contiguous
            q_pad = q[self.first_row:self.first_row + max_q].unsqueeze(0)
        keys = gather_blocks(k_cache, self.block_ids, self.kv_shape).to(q.dtype)    # [G, Hkv, L, D]
        values = gather_blocks(v_cache, self.block_ids, self.kv_shape).to(q.dtype)
        o = F.scaled_dot_product_attention(
            q_pad.transpose(1, 2), keys, values, attn_mask=self.mask(q.dtype), scale=scale,
            enable_gqa=True)                                         # [G, Hq, max_q, D]
        o = o.transpose(1, 2)                                        # [G, max_q, Hq, D]
        return o[self.pad_b, self.pad_i] if self.padded else o[0]   # [rows, Hq, D]
