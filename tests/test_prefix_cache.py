"""Prefix caching: hashing, sharing, and the invariant that every block ends up either
free or free-and-cached — never lost — whatever the workload (property-tested)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm import SamplingParams
from minillm.kv_cache.prefix_cache import block_hashes
from minillm.sim.simulate import make_sim_engine, run_to_completion

pytestmark = pytest.mark.unit


def test_block_hash_depends_on_the_whole_prefix():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    b = block_hashes([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert len(a) == 2 and len(b) == 2            # only full blocks are hashed
    assert a[0] != b[0] and a[1] != b[1]          # same 2nd block, different prefix
    assert block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 0], 4) == a


def run_shared_prefix(block_size, num_kv_blocks, chunked, mode, n, prefix_len, seed):
    engine = make_sim_engine(block_size=block_size, num_kv_blocks=num_kv_blocks,
                             max_num_seqs=4, enable_chunked_prefill=chunked,
                             max_num_batched_tokens=16 if chunked else 64,
                             enable_prefix_caching=True, preemption_mode=mode,
                             max_model_len=64, vocab_size=50)
    rng = random.Random(seed)
    prefix = [rng.randrange(3, 50) for _ in range(prefix_len)]
    for i in range(n):
        suffix = [rng.randrange(3, 50) for _ in range(rng.randrange(1, 6))]
        out_len = rng.randrange(1, 12)
        engine.add_request(f"r{i}", {"prompt_token_ids": prefix + suffix},
                           SamplingParams(max_tokens=out_len, temperature=0.0),
                           arrival_time=0.05 * i)
        engine.runner.output_lens[f"r{i}"] = out_len
    trace = run_to_completion(engine, max_steps=5000)
    return engine, trace


@settings(deadline=None, max_examples=40)
@given(block_size=st.sampled_from([2, 4, 8]), extra_blocks=st.integers(0, 12),
       chunked=st.booleans(), mode=st.sampled_from(["recompute", "swap"]),
       n=st.integers(1, 10), prefix_len=st.integers(0, 24), seed=st.integers(0, 1000))
def test_every_block_is_free_or_cached_after_a_run(block_size, extra_blocks, chunked, mode,
                                                    n, prefix_len, seed):
    needed = -(-64 // block_size)                      # one max_model_len sequence must fit
    engine, trace = run_shared_prefix(block_size, needed + extra_blocks, chunked, mode,
                                      n, prefix_len, seed)
    kv = engine.scheduler.kv
    allocator = kv.allocator
    assert all(r.finish_reason in ("stop", "length") for r in trace.requests.values())
    assert allocator.num_free == allocator.num_blocks
    assert all(c == 0 for c in allocator.ref_counts)
    cache = kv.prefix_cache
    for h, block in cache.block_of.items():            # the two maps mirror each other
        assert cache.hash_of[block] == h
    assert len(cache.block_of) == len(cache.hash_of) <= allocator.num_blocks
    for parent, kids in cache.children.items():        # only live entries, under their parent
        assert all(cache.entries[cache.hash_of[kid]].parent_block == parent for kid in kids)
    if kv.swap_allocator is not None:
        assert kv.swap_allocator.num_free == kv.swap_allocator.num_blocks
    # a shared block holds its tokens once: never more tokens than slots in use
    for step in trace.steps:
        assert step.kv_tokens_held <= step.kv_blocks_used * block_size


def test_shared_system_prompt_hits_the_cache():
    engine, trace = run_shared_prefix(4, 64, False, "recompute", n=6, prefix_len=20, seed=1)
    cached = [trace.requests[f"r{i}"].num_cached_tokens for i in range(6)]
    assert cached[0] == 0                              # the first one has nothing to reuse
    assert all(c == 20 for c in cached[1:]), cached    # 5 full blocks of the 20-token prefix


def test_a_hash_collision_is_a_miss_not_someone_elses_kv(monkeypatch):
    """Every block made to hash alike: only prompts that really share a prefix may hit,
    and the answers equal the engine without a prefix cache (tiny real model)."""
    import minillm.kv_cache.prefix_cache as prefix_cache
    from minillm import LLM
    from minillm.model.tiny import build_tiny_llama

    monkeypatch.setattr(prefix_cache, "hash_block", lambda parent, tokens: 7)
    tiny = build_tiny_llama(seed=0)
    shared = list(range(10, 18))
    prompts = [{"prompt_token_ids": p} for p in
               (shared + [3, 4], shared + [5, 6, 7], list(range(40, 50)))]
    params = SamplingParams(temperature=0.0, max_tokens=5)
    plain = LLM(tiny, block_size=4, num_kv_blocks=32, max_num_seqs=1)
    cached = LLM(tiny, block_size=4, num_kv_blocks=32, max_num_seqs=1, enable_prefix_caching=True)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params, use_tqdm=False)]
    got = cached.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in got] == want
    hits = [cached.trace.requests[o.request_id].num_cached_tokens for o in got]
    # the 2nd shares 2 blocks but its 2nd block's entry (same hash) names another parent:
    # only the 1st block is trusted; the unrelated prompt collided everywhere, and missed
    assert hits == [0, 4, 0]


def test_a_collision_one_block_back_does_not_leak_into_the_next_block(monkeypatch):
    """X and Y collide at block 0. Y's block 1 (tokens T) was computed after Y, not X:
    a prompt X + T must reuse X's block 0 and recompute T, not take Y's block 1."""
    import minillm.kv_cache.prefix_cache as prefix_cache
    from minillm.kv_cache.allocator import BlockAllocator
    from minillm.engine.sequence import Sequence

    real = prefix_cache.hash_block
    X, Y, T = [1, 2], [3, 4], [5, 6]
    monkeypatch.setattr(prefix_cache, "hash_block", lambda parent, tokens: 42
                        if parent is None and list(tokens) in (X, Y) else real(parent, tokens))
    allocator = BlockAllocator(16)
    cache = prefix_cache.PrefixCache(allocator, 2)

    def computed(tokens):
        seq = Sequence(str(tokens), tokens, SamplingParams(max_tokens=1))
        seq.block_table = [allocator.allocate() for _ in range(len(tokens) // 2)]
        seq.num_computed_tokens = len(tokens)
        return seq

    x, y = computed(X + [9]), computed(Y + T + [9])
    cache.register(x)
    cache.register(y)
    assert cache.match(Sequence("probe", X + T + [7], SamplingParams(max_tokens=1))) == x.block_table
    # and a reused block takes every block cached after it with it
    cache.evict(y.block_table[0])
    assert y.block_table[1] not in cache.hash_of


def test_a_reused_block_leaves_its_old_parent_so_its_new_entry_survives():
    """Block c held A's 2nd block; it is reused (evicted alone) and cached again after B's
    first block. Evicting A's first block later must not take c's new entry with it."""
    from minillm.kv_cache.allocator import BlockAllocator
    from minillm.kv_cache.prefix_cache import PrefixCache
    from minillm.engine.sequence import Sequence

    cache = PrefixCache(BlockAllocator(8), 2)

    def computed(tokens, blocks):
        seq = Sequence(str(tokens), tokens, SamplingParams(max_tokens=1))
        seq.block_table, seq.num_computed_tokens = blocks, len(tokens)
        return seq

    a0, c, b0 = 0, 1, 2
    cache.register(computed([1, 2, 3, 4, 9], [a0, c]))
    cache.evict(c)                                      # c reused for new tokens
    cache.register(computed([5, 6, 7, 8, 9], [b0, c]))  # ... which are cached after b0
    cache.evict(a0)
    assert c in cache.hash_of and cache.entries[cache.hash_of[c]].parent_block == b0
    assert cache.children == {b0: [c]}
