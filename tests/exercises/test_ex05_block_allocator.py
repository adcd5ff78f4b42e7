"""Lesson 05 exercise: a block allocator and a block table with slot mapping.

The first tests check each method on small hand-worked cases; the last two are
Hypothesis property tests that run long random sequences of operations and check the
invariants a paged KV cache lives on: no block handed out twice, reference counts
that match who holds what, unique slots across live sequences, and no leak.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXERCISE = "ex05_block_allocator"
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_allocate_distinct_blocks(ex):
    alloc = ex.BlockAllocator(4)
    assert alloc.num_free == 4
    assert list(alloc.free_list) == [0, 1, 2, 3] and list(alloc.ref_counts) == [0, 0, 0, 0], \
        "keep the free ids in self.free_list and the counts in self.ref_counts (lesson 13 reads them)"
    first = alloc.allocate()
    assert first == 0, "a fresh allocator hands out block 0 first"
    rest = [alloc.allocate() for _ in range(3)]
    assert sorted([first, *rest]) == [0, 1, 2, 3]
    assert alloc.num_free == 0
    assert all(alloc.ref_count(b) == 1 for b in range(4))
    with pytest.raises(MemoryError):
        alloc.allocate()


def test_free_and_double_free(ex):
    alloc = ex.BlockAllocator(3)
    a, b = alloc.allocate(), alloc.allocate()
    alloc.free(a)
    assert alloc.num_free == 2 and alloc.ref_count(a) == 0
    with pytest.raises(ValueError):
        alloc.free(a)                              # double free
    assert alloc.num_free == 2, "a refused double free changes nothing"
    with pytest.raises(ValueError):
        alloc.free(2)                              # never allocated
    again = {alloc.allocate(), alloc.allocate()}
    assert a in again and b not in again, "a freed block can be handed out again"


def test_share_reference_counts(ex):
    alloc = ex.BlockAllocator(2)
    block = alloc.allocate()
    alloc.share(block)
    alloc.share(block)
    assert alloc.ref_count(block) == 3
    alloc.free(block)
    alloc.free(block)
    assert alloc.num_free == 1, "still used once: not free yet"
    alloc.free(block)
    assert alloc.num_free == 2 and alloc.ref_count(block) == 0
    with pytest.raises(ValueError):
        alloc.share(block)                         # sharing a free block is a bug


def test_block_table_on_demand(ex):
    alloc = ex.BlockAllocator(8)
    table = ex.BlockTable(alloc, block_size=4)
    assert table.blocks_needed(1) == 1
    table.append_tokens(5)                         # 5 tokens → 2 blocks
    assert len(table.blocks) == 2 and table.num_tokens == 5 and alloc.num_free == 6
    assert table.blocks_needed(3) == 0 and table.blocks_needed(4) == 1
    table.append_tokens(3)                         # fills block 2 exactly: no new block
    assert len(table.blocks) == 2 and alloc.num_free == 6
    table.append_tokens(1)                         # the 9th token opens block 3
    assert len(table.blocks) == 3 and alloc.num_free == 5
    table.free()
    assert table.blocks == [] and table.num_tokens == 0 and alloc.num_free == 8


def test_slot_mapping(ex):
    from minillm.kv_cache import KVCacheManager
    from minillm.sampling_params import SamplingParams
    from minillm.engine.sequence import Sequence

    alloc = ex.BlockAllocator(6)
    other = ex.BlockTable(alloc, block_size=4)
    table = ex.BlockTable(alloc, block_size=4)
    other.append_tokens(4)                         # takes block 0
    slots = table.append_tokens(6)                 # blocks 1, 2
    other.append_tokens(1)                         # block 3: tables interleave
    tail = table.append_tokens(3)                  # 9 tokens: needs block 4
    assert table.blocks == [1, 2, 4]
    assert slots == [4, 5, 6, 7, 8, 9] and tail == [10, 11, 16]
    assert table.slot(8) == 16 and table.slot_mapping(0, 9) == slots + tail
    with pytest.raises(IndexError):
        table.slot(9)
    # the same formula as the engine's KVCacheManager.slot
    seq = Sequence("s", [0] * 9, SamplingParams(max_tokens=1))
    seq.block_table = list(table.blocks)
    manager = KVCacheManager(6, 4)
    assert [manager.slot(seq, p) for p in range(9)] == table.slot_mapping(0, 9)


def test_out_of_blocks_changes_nothing(ex):
    alloc = ex.BlockAllocator(3)
    table = ex.BlockTable(alloc, block_size=2)
    table.append_tokens(3)                         # 2 blocks, 1 free
    with pytest.raises(MemoryError):
        table.append_tokens(4)                     # 7 tokens would need 4 blocks
    assert table.num_tokens == 3 and len(table.blocks) == 2
    assert alloc.num_free == 1, "blocks taken by the failed call are given back"
    table.append_tokens(3)                         # 6 tokens, 3 blocks: fits
    assert alloc.num_free == 0


# ---------------------------------------------------------------------- properties

allocator_ops = st.lists(st.tuples(st.sampled_from(["allocate", "share", "free"]),
                                   st.integers(0, 10_000)), max_size=120)


@PROPERTY_SETTINGS
@given(num_blocks=st.integers(1, 12), ops=allocator_ops)
def test_property_allocator_invariants(ex, num_blocks, ops):
    """Random allocate / share / free against a model of who holds what."""
    alloc = ex.BlockAllocator(num_blocks)
    refs = {}                                      # model: block id -> reference count
    for op, pick in ops:
        if op == "allocate":
            if len(refs) == num_blocks:
                with pytest.raises(MemoryError):
                    alloc.allocate()
                continue
            block = alloc.allocate()
            assert 0 <= block < num_blocks
            assert block not in refs, f"block {block} handed out twice"
            refs[block] = 1
        elif op == "share" and refs:
            block = sorted(refs)[pick % len(refs)]
            alloc.share(block)
            refs[block] += 1
        elif op == "free":
            block = pick % num_blocks
            if block not in refs:
                with pytest.raises(ValueError):
                    alloc.free(block)              # double free / never allocated
                continue
            alloc.free(block)
            refs[block] -= 1
            if refs[block] == 0:
                del refs[block]
        assert alloc.num_free == num_blocks - len(refs)
        assert all(alloc.ref_count(b) == refs.get(b, 0) for b in range(num_blocks))
    for block, count in list(refs.items()):        # release everything: nothing leaks
        for _ in range(count):
            alloc.free(block)
    assert alloc.num_free == num_blocks


table_ops = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 9), st.booleans()),
                     max_size=60)


@PROPERTY_SETTINGS
@given(num_blocks=st.integers(1, 16), block_size=st.sampled_from([1, 2, 3, 4, 8]),
       ops=table_ops)
def test_property_block_tables(ex, num_blocks, block_size, ops):
    """Five sequences append tokens and finish at random on one shared pool."""
    alloc = ex.BlockAllocator(num_blocks)
    tables = [ex.BlockTable(alloc, block_size) for _ in range(5)]
    for which, num_new, finish in ops:
        table = tables[which]
        if finish:
            table.free()
        else:
            before = (table.num_tokens, list(table.blocks), alloc.num_free)
            try:
                table.append_tokens(num_new)
            except MemoryError:
                assert (table.num_tokens, table.blocks, alloc.num_free) == before
        held = [b for t in tables for b in t.blocks]
        assert len(held) == len(set(held)), "a block belongs to two sequences"
        assert alloc.num_free == num_blocks - len(held), "free + held != all blocks"
        assert all(alloc.ref_count(b) == 1 for b in held)
        for t in tables:                           # exactly the blocks the tokens need
            assert len(t.blocks) == -(-t.num_tokens // block_size)
        slots = [t.slot(p) for t in tables for p in range(t.num_tokens)]
        assert len(slots) == len(set(slots)), "two live tokens share a cache slot"
        assert all(0 <= s < num_blocks * block_size for s in slots)
    for t in tables:
        t.free()
    assert alloc.num_free == num_blocks, "blocks leaked after every sequence finished"
