"""The paged KV cache's bookkeeping: which physical block holds which tokens.

The KV cache is cut into `num_blocks` fixed-size **blocks** of `block_size` token slots
each (the tensors live in `tensors.py`; this file never touches them). A sequence owns
a **block table**: the list of physical block ids that hold its tokens, in order, so
token position `p` lives in

    block  = block_table[p // block_size]
    offset = p % block_size
    slot   = block * block_size + offset      # the row written by `slot_mapping`

Two ways to hand out blocks, both real here so their waste can be measured:

* **paged** (PagedAttention): a block is taken only when a sequence's next token needs
  one, from anywhere in the cache. At most `block_size - 1` slots per sequence sit
  empty (the tail of its last block).
* **contiguous reservation** (what static batching does): a request reserves one
  unbroken run of blocks for its worst case, `prompt + max_tokens`, when it is
  admitted. Everything it never generates is reserved but empty, and a free run long
  enough may not exist even when enough blocks are free in total (external
  fragmentation).

`BlockAllocator` keeps reference counts so that one block can be shared (prefix
caching): a block returns to the free pool when its last user lets go. Freeing a block
that is already free is a bug and raises at once.
"""

from __future__ import annotations

from minillm.engine.sequence import Sequence
from minillm.kv_cache.allocator import BlockAllocator, cdiv, slot_of
from minillm.kv_cache.prefix_cache import PrefixCache


class KVCacheManager:
    """Gives sequences the blocks they need, paged or as a contiguous reservation."""

    # the parts it is built from (lesson 13's engine puts the learner's parts here)
    allocator_class = BlockAllocator
    prefix_cache_class = PrefixCache

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 num_swap_blocks: int = 0):
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        self.block_size = block_size
        self.allocator = self.allocator_class(num_blocks)
        self.prefix_cache = None
        if enable_prefix_caching:
            self.prefix_cache = self.prefix_cache_class(self.allocator, block_size)
            self.allocator.on_reuse = self.prefix_cache.evict
        # swap space: blocks in CPU memory that hold preempted sequences' K/V
        self.swap_allocator = BlockAllocator(num_swap_blocks) if num_swap_blocks else None

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.allocator.num_free

    def tokens_held(self, holders: list[Sequence]) -> int:
        """Token slots of the used blocks that hold a computed token.

        Without prefix caching every block has one owner, so this is the holders'
        computed tokens. With it, a shared block holds its tokens once however many
        sequences point at it: count each block once, as full as its fullest sharer.
        """
        if self.prefix_cache is None:
            return sum(s.num_computed_tokens for s in holders if s.block_table)
        bs, fill = self.block_size, {}            # block id -> tokens it holds
        for seq in holders:
            for i, block in enumerate(seq.block_table):
                held = min(bs, seq.num_computed_tokens - i * bs)
                if held <= 0:
                    break
                fill[block] = max(fill.get(block, 0), held)
        return sum(fill.values())

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks `seq` needs so that `num_new_tokens` more tokens fit."""
        tokens_after = seq.num_computed_tokens + num_new_tokens
        return max(0, cdiv(tokens_after, self.block_size) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_new_tokens: int, reserve: int = 0) -> bool:
        """True if the blocks for `num_new_tokens` are free, keeping `reserve` spare."""
        return self.blocks_needed(seq, num_new_tokens) + reserve <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Append the blocks `seq` needs for its next `num_new_tokens` tokens."""
        needed = self.blocks_needed(seq, num_new_tokens)
        if needed > self.num_free_blocks:
            raise RuntimeError(
                f"{seq.request_id} needs {needed} blocks, {self.num_free_blocks} free")
        for _ in range(needed):
            seq.block_table.append(self.allocator.allocate())

    def reserve_contiguous(self, seq: Sequence, num_tokens: int | None = None) -> bool:
        """Reserve one run of blocks for `num_tokens` (default: prompt + max_tokens).

        Static batching reserves the worst case up front. Returns False, taking
        nothing, when no free run is long enough.
        """
        assert not seq.block_table, "reservation happens once, at admission"
        num_tokens = seq.max_total_tokens if num_tokens is None else num_tokens
        run = self.allocator.allocate_contiguous(cdiv(num_tokens, self.block_size))
        if run is None:
            return False
        seq.block_table = run
        return True

    def acquire_cached_prefix(self, seq: Sequence) -> int:
        """Share cached blocks of `seq`'s prompt prefix; return the tokens they cover."""
        if self.prefix_cache is None or seq.block_table or seq.num_computed_tokens:
            return 0
        return self.prefix_cache.acquire(seq)

    def on_tokens_computed(self, seq: Sequence) -> None:
        """After a step: register `seq`'s newly full blocks in the prefix cache."""
        if self.prefix_cache is not None:
            self.prefix_cache.register(seq)

    def swap_out(self, seq: Sequence) -> list[tuple[int, int]] | None:
        """Move `seq`'s computed blocks to swap space: [(device block, swap block)].

        Returns None, changing nothing, when swap space is missing or too small.
        """
        used = cdiv(seq.num_computed_tokens, self.block_size)
        swap = self.swap_allocator
        if swap is None or used > swap.num_free:
            return None
        mapping = [(block, swap.allocate()) for block in seq.block_table[:used]]
        self.free(seq)
        seq.swap_table = [cpu for _, cpu in mapping]
        return mapping

    def swap_in(self, seq: Sequence) -> list[tuple[int, int]]:
        """Bring a swapped sequence back: [(swap block, device block)]."""
        assert not seq.block_table, "swap-in starts from an empty block table"
        mapping = [(cpu, self.allocator.allocate()) for cpu in seq.swap_table]
        for cpu in seq.swap_table:
            self.swap_allocator.free(cpu)
        seq.block_table = [gpu for _, gpu in mapping]
        seq.swap_table = []
        return mapping

    def free_swapped(self, seq: Sequence) -> None:
        for cpu in seq.swap_table:
            self.swap_allocator.free(cpu)
        seq.swap_table = []

    def free(self, seq: Sequence) -> None:
        """Give back every block `seq` holds (last block first)."""
        for block_id in reversed(seq.block_table):
            self.allocator.free(block_id)
        seq.block_table = []

    def slot(self, seq: Sequence, position: int) -> int:
        """The flat cache row of token `position` of `seq`."""
        return slot_of(seq.block_table, position, self.block_size)
