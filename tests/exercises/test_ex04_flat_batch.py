"""Lesson 04 exercise: the flat batch metadata and per-sequence attention.

Graded against minillm itself: `minillm/model/batch.py::build_flat_batch` (the engine's flat batch) and
the attention backends of `minillm.attention` over a paged KV cache. Each test is one task.
"""

from __future__ import annotations

import pytest
import torch

from minillm.attention import TorchAttention, attend_per_sequence, write_kv
from minillm.engine.sequence import Sequence
from minillm.model.batch import build_attention_metadata, build_flat_batch
from minillm.sampling_params import SamplingParams
from minillm.scheduler import SchedulerOutput, scheduled_row

EXERCISE = "ex04_flat_batch"
BLOCK = 4

# the module docstring's example: a fresh prompt, a decode, the rest of a chunked prefill
EXAMPLE = [([11, 12, 13], 0, [7]),
           ([21, 22, 23, 24, 25, 26], 5, [2, 9]),
           ([31, 32, 33, 34, 35, 36, 37], 5, [4, 1])]
# a bigger mix: 5 requests, scattered blocks
MIX = [(list(range(40, 49)), 0, [3, 0, 5]),
       (list(range(60, 73)), 12, [8, 1, 2, 6]),
       (list(range(80, 82)), 1, [4]),
       (list(range(90, 101)), 4, [9, 7, 10]),
       ([5], 0, [11])]


def minillm_batch(requests, block_size=BLOCK):
    """What the engine builds (`flat_batch.build_flat_batch`) for the same requests."""
    plan = SchedulerOutput()
    for i, (tokens, computed, table) in enumerate(requests):
        seq = Sequence(f"r{i}", list(tokens), SamplingParams())
        seq.num_computed_tokens, seq.block_table = computed, list(table)
        plan.scheduled.append(scheduled_row(seq, len(tokens) - computed))
    batch = build_flat_batch(plan, block_size, torch.device("cpu"))
    meta = batch.meta
    return {"input_ids": batch.input_ids, "positions": batch.positions,
            "query_start_loc": meta.query_start_loc, "seq_lens": meta.seq_lens,
            "slot_mapping": meta.slot_mapping, "logits_indices": batch.logits_indices}


def as_list(batch, key):
    value = batch[key]
    assert isinstance(value, torch.Tensor), f"{key} must be a torch.Tensor"
    assert value.dim() == 1, f"{key} must be 1-D, got shape {tuple(value.shape)}"
    return value.tolist()


@pytest.mark.parametrize("requests", [EXAMPLE, MIX], ids=["example", "mix"])
def test_input_ids_and_positions(ex, requests):
    mine, ref = ex.build_flat_batch(requests, BLOCK), minillm_batch(requests)
    assert as_list(mine, "input_ids") == ref["input_ids"].tolist()
    assert as_list(mine, "positions") == ref["positions"].tolist()
    if requests is EXAMPLE:
        assert as_list(mine, "positions") == [0, 1, 2, 5, 5, 6]


@pytest.mark.parametrize("requests", [EXAMPLE, MIX], ids=["example", "mix"])
def test_query_start_loc_and_seq_lens(ex, requests):
    mine, ref = ex.build_flat_batch(requests, BLOCK), minillm_batch(requests)
    assert as_list(mine, "query_start_loc") == ref["query_start_loc"].tolist()
    assert as_list(mine, "seq_lens") == ref["seq_lens"].tolist()
    assert not mine["query_start_loc"].is_floating_point()


@pytest.mark.parametrize("requests", [EXAMPLE, MIX], ids=["example", "mix"])
def test_slot_mapping_and_logits_indices(ex, requests):
    mine, ref = ex.build_flat_batch(requests, BLOCK), minillm_batch(requests)
    assert as_list(mine, "slot_mapping") == ref["slot_mapping"].tolist()
    assert as_list(mine, "logits_indices") == ref["logits_indices"].tolist()
    if requests is EXAMPLE:
        assert as_list(mine, "slot_mapping") == [28, 29, 30, 37, 5, 6]


def random_attention_case(query_lens, seq_lens, num_heads, num_kv_heads, head_dim=16, seed=0):
    """Random q and per-sequence K/V, both padded [B, L, Hkv, D] and in a paged cache."""
    g = torch.Generator().manual_seed(seed)
    B, L = len(seq_lens), max(seq_lens)
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=g)
    k = torch.randn(B, L, num_kv_heads, head_dim, generator=g)
    v = torch.randn(B, L, num_kv_heads, head_dim, generator=g)
    # scatter each sequence's K/V over shuffled blocks of a paged cache
    blocks_per_seq = [-(-s // BLOCK) for s in seq_lens]
    order = torch.randperm(sum(blocks_per_seq) + 3, generator=g).tolist()
    tables, slots, rows_k, rows_v = [], [], [], []
    for b, s in enumerate(seq_lens):
        table = [order.pop() for _ in range(blocks_per_seq[b])]
        tables.append(table)
        slots += [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(s)]
        rows_k.append(k[b, :s]), rows_v.append(v[b, :s])
    num_blocks = len(order) + sum(blocks_per_seq)
    k_cache = torch.zeros(num_blocks, BLOCK, num_kv_heads, head_dim)
    v_cache = torch.zeros_like(k_cache)
    write_kv(torch.cat(rows_k), torch.cat(rows_v), k_cache, v_cache, torch.tensor(slots))
    meta = build_attention_metadata(query_lens, seq_lens, tables, [-1] * sum(query_lens),
                                    BLOCK, torch.device("cpu"))
    return q, k, v, k_cache, v_cache, meta


def check_attention(ex, query_lens, seq_lens, num_heads, num_kv_heads):
    q, k, v, k_cache, v_cache, meta = random_attention_case(query_lens, seq_lens,
                                                            num_heads, num_kv_heads)
    scale = q.shape[-1] ** -0.5
    mine = ex.attend_per_sequence(q, k, v, meta.query_start_loc, meta.seq_lens, scale)
    assert mine.shape == q.shape, f"output shape {tuple(mine.shape)}, expected {tuple(q.shape)}"
    reference = attend_per_sequence(q, k_cache, v_cache, meta, scale)       # minillm's loop
    no_new_kv = q.new_zeros(q.shape[0], num_kv_heads, q.shape[-1])   # slot -1: not written
    batched = TorchAttention()(q, no_new_kv, no_new_kv, k_cache, v_cache, meta, scale)
    torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine, batched, atol=1e-5, rtol=1e-5)


def test_attention_prefills_and_decodes(ex):
    # two whole prompts (offset 0) and three decodes (one query, the whole context)
    check_attention(ex, query_lens=[6, 1, 9, 1, 1], seq_lens=[6, 14, 9, 3, 21],
                    num_heads=2, num_kv_heads=2)


def test_attention_chunk_offsets_and_gqa(ex):
    # chunks that start mid-sequence (query i at position L - n + i), 4 query heads per K/V head
    check_attention(ex, query_lens=[5, 1, 3, 7], seq_lens=[12, 8, 3, 10],
                    num_heads=8, num_kv_heads=2)


def test_your_flat_batch_runs_the_model(ex):
    """Two steps of the tiny Llama fed with YOUR metadata give transformers' logits."""
    from minillm.kv_cache.tensors import allocate_kv_cache
    from minillm.model.llama import LlamaModel
    from minillm.model.tiny import build_tiny_llama
    hf = build_tiny_llama(seed=0)
    model = LlamaModel.from_hf(hf)
    caches = allocate_kv_cache(model.num_layers, 16, BLOCK, model.num_kv_heads, model.head_dim,
                               torch.float32, "cpu")
    prompts = [[5, 9, 14, 3, 77, 8], [200, 31], [4, 4, 150, 61, 9, 12, 33, 2, 90]]
    tables = [[3, 4], [0, 9], [1, 7, 12]]
    requests = [(p, 0, t) for p, t in zip(prompts, tables)]            # step 1: prefills
    for _ in range(2):                                                 # step 2: decodes
        batch = ex.build_flat_batch(requests, BLOCK)
        starts = batch["query_start_loc"].tolist()
        meta = build_attention_metadata([b - a for a, b in zip(starts, starts[1:])],
                                        batch["seq_lens"].tolist(), [r[2] for r in requests],
                                        batch["slot_mapping"].tolist(), BLOCK, torch.device("cpu"))
        logits = model(batch["input_ids"], batch["positions"], caches,
                       TorchAttention().for_step(meta), batch["logits_indices"])   # [B, V]
        with torch.no_grad():
            for b, (tokens, _, _) in enumerate(requests):
                ref = hf(torch.tensor([tokens])).logits[0, -1]
                torch.testing.assert_close(logits[b], ref, atol=1e-4, rtol=1e-4)
        requests = [(tokens + [int(logits[b].argmax())], len(tokens), table)
                    for b, (tokens, _, table) in enumerate(requests)]
