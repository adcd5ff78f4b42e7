"""Lesson 04 — selective batching (选择性批处理): build the flat batch, attend per sequence.

Selective batching lays every scheduled sequence's new tokens end to end — one flat
batch of T tokens, no padding — so the linear layers, norms and MLP see one [T, hidden]
matrix. Only attention needs to know where one sequence ends and the next begins.

Example (block_size 4): request A is a fresh 3-token prompt, B has 5 tokens cached and
decodes its 6th, C has 5 of its 7 prompt tokens cached (the rest of a chunked prefill):

    requests = [([11, 12, 13],             0, [7]),       # A: tokens, num_computed, blocks
                ([21, 22, 23, 24, 25, 26], 5, [2, 9]),    # B
                ([31, 32, 33, 34, 35, 36, 37], 5, [4, 1])]  # C

    input_ids       [11, 12, 13, 26, 36, 37]      the uncomputed tokens, A then B then C
    positions       [ 0,  1,  2,  5,  5,  6]      each token's place in its own sequence
    query_start_loc [0, 3, 4, 6]                  where each request's rows start ("cu_seqlens")
    seq_lens        [3, 6, 7]                     tokens in the cache after this step
    slot_mapping    [28, 29, 30, 37, 5, 6]        block_table[p // 4] * 4 + p % 4
    logits_indices  [2, 3, 5]                     each request's last row: it samples

The answer key: `minillm/model/batch.py::build_flat_batch` (it takes the scheduler's plan and also
handles prefill chunks that do not sample and speculative rows) and
`minillm/attention/reference.py::attend_per_sequence` (the same loop over a *paged* cache).

Run the check cell at the end of lesson 04 (or `python -m minillm.grading 04`).
"""

from __future__ import annotations

import torch


def build_flat_batch(requests: list[tuple[list[int], int, list[int]]],
                     block_size: int) -> dict[str, torch.Tensor]:
    """The flat batch for `requests`, each `(token_ids, num_computed, block_table)`.

    `token_ids` are all the request's known tokens (prompt + generated so far); the first
    `num_computed` already have K/V in the cache, the rest run now. Every request runs all
    of its uncomputed tokens, so every request samples from its last row.

    Return a dict of 1-D tensors (see the module docstring for an example):
        input_ids [T] long, positions [T] long, query_start_loc [B+1] int32,
        seq_lens [B] int32, slot_mapping [T] long, logits_indices [B] long.
    """
    raise NotImplementedError("Your turn: loop over requests, extend Python lists, "
                              "make each tensor once at the end")


def attend_per_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                        scale: float) -> torch.Tensor:
    """Causal attention of the flat batch's queries, one sequence at a time.

    q [T, Hq, D]       the queries of the flat batch (request b owns rows
                       query_start_loc[b] : query_start_loc[b+1])
    k, v [B, L, Hkv, D]  each request's keys/values, contiguous and padded: row b holds
                       its first seq_lens[b] positions (the new tokens are the last ones)
    returns [T, Hq, D]

    For request b with n new rows and L = seq_lens[b] keys, its i-th query sits at
    position L - n + i and may look at key positions 0 … L - n + i (causal, with an
    offset: a decode's single query sees the whole context). GQA: Hq query heads share
    Hkv K/V heads, query head h uses K/V head h // (Hq // Hkv)
    (`tensor.repeat_interleave(Hq // Hkv, dim=...)` lines them up).
    softmax(q·kᵀ · scale, masked) · v, per request; the padding past L is never read.
    """
    raise NotImplementedError("Your turn: for each request, slice q, take k/v[b, :L], "
                              "mask, softmax, multiply by v")
