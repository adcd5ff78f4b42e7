"""Lesson 05 — the paged KV cache's bookkeeping: a block allocator and a block table.

The KV cache is cut into `num_blocks` blocks of `block_size` token slots each. Two
small objects decide where every token's keys and values go:

* `BlockAllocator` (the answer key's is `minillm/kv_cache/allocator.py::BlockAllocator`,
  same public methods) owns the pool of physical block ids 0 … num_blocks-1: a **free
  list** of the ids nobody uses, and a **reference count** per block (how many
  sequences use it — more than one once blocks are shared, e.g. a common prompt
  prefix). A block returns to the free list when its last user lets go; freeing a
  block that is already free is a bug and must raise at once.
* `BlockTable` is one sequence's view: the list of physical blocks that hold its
  tokens, in order. Appending tokens takes new blocks **on demand** — only when the
  last block is full — and token position `p` lives at

      slot = block_table[p // block_size] * block_size + p % block_size

  which is the row of the flat cache `[num_blocks * block_size, ...]` that the model
  writes that token's K/V into (`slot_mapping` in the engine).

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 05 (or `python -m minillm.grading 05`).
"""

from __future__ import annotations

from collections import deque


class BlockAllocator:
    """A free list + reference counts over block ids 0 … num_blocks-1."""

    def __init__(self, num_blocks: int):
        """Every block starts free with reference count 0.

        Keep them in `self.free_list` (a deque of the free ids) and `self.ref_counts` (a
        list, one count per block): lesson 13's engine reads these two names to revive a
        freed block that still caches a prompt prefix. Fill the free list 0, 1, 2, … so a
        fresh allocator hands out block 0 first.
        A `deque` makes it first-in, first-out: `allocate` pops from the left, `free`
        appends on the right (both O(1)), so a freed block is reused last. (minillm's own
        `kv_cache/allocator.py` keeps a min-heap instead and always hands out the
        lowest free id — a compact block map to draw; either rule is correct.)
        """
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.free_list: deque[int] = deque(range(num_blocks))
        self.ref_counts: list[int] = [0] * num_blocks

    @property
    def num_free(self) -> int:
        """How many blocks are free right now."""
        return len(self.free_list)

    def allocate(self) -> int:
        """Take a free block, set its reference count to 1 and return its id.

        Raises MemoryError when no block is free (the scheduler should have checked).
        """
        if not self.free_list:
            raise MemoryError("no free KV block")
        block_id = self.free_list.popleft()
        self.ref_counts[block_id] = 1
        return block_id

    def share(self, block_id: int) -> None:
        """One more user of an allocated block. Sharing a free block raises ValueError."""
        self._check_id(block_id)
        if self.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free: allocate it before sharing it")
        self.ref_counts[block_id] += 1

    def free(self, block_id: int) -> None:
        """Drop one reference; at zero the block goes back to the free list.

        Freeing a block whose count is already 0 (a double free) raises ValueError.
        """
        self._check_id(block_id)
        if self.ref_counts[block_id] == 0:
            raise ValueError(f"double free of block {block_id}")
        self.ref_counts[block_id] -= 1
        if self.ref_counts[block_id] == 0:
            self.free_list.append(block_id)

    def ref_count(self, block_id: int) -> int:
        """How many users block `block_id` has (0: free)."""
        self._check_id(block_id)
        return self.ref_counts[block_id]

    def _check_id(self, block_id: int) -> None:
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block id {block_id} outside 0..{self.num_blocks - 1}")


class BlockTable:
    """One sequence's blocks, taken from `allocator` as its tokens arrive."""

    def __init__(self, allocator: BlockAllocator, block_size: int):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.allocator = allocator
        self.block_size = block_size
        self.blocks: list[int] = []       # physical block ids, in logical order
        self.num_tokens = 0               # tokens stored so far

    def blocks_needed(self, num_new_tokens: int) -> int:
        """Extra blocks needed so that `num_new_tokens` more tokens fit.

        Example (block_size 4): 5 tokens stored in 2 blocks; 3 more → 8 tokens still
        fit in 2 blocks → 0; 4 more → 9 tokens need 3 blocks → 1.
        """
        total = self.num_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(self.blocks))

    def append_tokens(self, num_new_tokens: int) -> list[int]:
        """Store `num_new_tokens` more tokens; return the slots they are written to.

        Blocks are allocated on demand (only as many as the new tokens need). If the
        allocator runs out, nothing changes: give back the blocks taken by this call
        and let the MemoryError propagate.
        """
        taken = []
        try:
            for _ in range(self.blocks_needed(num_new_tokens)):
                taken.append(self.allocator.allocate())
        except MemoryError:
            for block_id in taken:
                self.allocator.free(block_id)
            raise
        self.blocks.extend(taken)
        start = self.num_tokens
        self.num_tokens += num_new_tokens
        return self.slot_mapping(start, self.num_tokens)

    def slot(self, position: int) -> int:
        """The flat cache row of token `position` (0 <= position < num_tokens).

        A position outside the stored tokens raises IndexError.
        """
        if not 0 <= position < self.num_tokens:
            raise IndexError(f"position {position} outside 0..{self.num_tokens - 1}")
        block_id = self.blocks[position // self.block_size]
        return block_id * self.block_size + position % self.block_size

    def slot_mapping(self, start: int, end: int) -> list[int]:
        """Slots of positions start … end-1, in order."""
        return [self.slot(p) for p in range(start, end)]

    def free(self) -> None:
        """Give every block back to the allocator (last block first); the table is empty after."""
        for block_id in reversed(self.blocks):
            self.allocator.free(block_id)
        self.blocks = []
        self.num_tokens = 0
