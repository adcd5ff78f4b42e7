"""The free pool of KV-cache blocks, with reference counts.

The KV cache is cut into `num_blocks` fixed-size **blocks** of `block_size` token slots.
`BlockAllocator` only knows block ids: which are free, and how many users each used
block has. One block can be shared (prefix caching): it returns to the free pool when
its last user lets go. Freeing a block that is already free is a bug and raises at once.
Which sequence holds which block is `manager.py`'s business.
"""

from __future__ import annotations

import heapq


def slot_of(block_table: list[int], position: int, block_size: int) -> int:
    """The flat cache row of token `position`: its block's first row + its offset there."""
    return block_table[position // block_size] * block_size + position % block_size


def cdiv(a: int, b: int) -> int:
    """Ceiling division: blocks needed for `a` tokens in blocks of `b`."""
    return -(-a // b)


class BlockAllocator:
    """Free pool + reference counts over block ids 0 … num_blocks-1.

    Free ids sit in a min-heap, so allocation always takes the lowest free id: the
    block map a lesson draws stays compact and runs are reproducible. Contiguous
    allocation marks a whole run used; the heap entries of that run become stale and
    are skipped when popped (lazy deletion).
    """

    def __init__(self, num_blocks: int):
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int):
            raise TypeError(f"num_blocks must be an int, got {type(num_blocks).__name__}")
        if num_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self._free_heap = list(range(num_blocks))
        self._num_free = num_blocks
        self.on_reuse = None      # called with a block id handed out for new tokens

    @property
    def num_free(self) -> int:
        return self._num_free

    def ref_count(self, block_id: int) -> int:
        """How many sequences use `block_id` (0: free)."""
        return self.ref_counts[block_id]

    def is_free(self, block_id: int) -> bool:
        return self.ref_counts[block_id] == 0

    def allocate(self) -> int:
        """Take one free block (the lowest id) and give it reference count 1."""
        while self._free_heap:
            block_id = heapq.heappop(self._free_heap)
            if self.ref_counts[block_id] == 0:
                self._take(block_id)
                self._reused(block_id)
                return block_id
        raise RuntimeError("no free KV block: check num_free before allocating")

    def allocate_contiguous(self, count: int) -> list[int] | None:
        """Take `count` adjacent free blocks (first fit), or None if no such run exists."""
        run_start, run_len = 0, 0
        for block_id in range(self.num_blocks):
            if self.ref_counts[block_id] == 0:
                if run_len == 0:
                    run_start = block_id
                run_len += 1
                if run_len == count:
                    blocks = list(range(run_start, run_start + count))
                    for b in blocks:
                        self._take(b)
                        self._reused(b)
                    return blocks
            else:
                run_len = 0
        return None

    def take(self, block_id: int) -> None:
        """Take one specific free block, keeping its contents (a prefix-cache hit)."""
        if self.ref_counts[block_id] != 0:
            raise RuntimeError(f"block {block_id} is not free")
        self._take(block_id)

    def share(self, block_id: int) -> None:
        """One more user of an allocated block (prefix caching)."""
        if self.ref_counts[block_id] == 0:
            raise RuntimeError(f"cannot share block {block_id}: it is free")
        self.ref_counts[block_id] += 1

    def free(self, block_id: int) -> None:
        """Drop one reference; the block is free again when none is left."""
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block id {block_id} outside 0..{self.num_blocks - 1}")
        if self.ref_counts[block_id] == 0:
            raise RuntimeError(f"double free of KV block {block_id}")
        self.ref_counts[block_id] -= 1
        if self.ref_counts[block_id] == 0:
            self._num_free += 1
            heapq.heappush(self._free_heap, block_id)
            if len(self._free_heap) > 2 * self.num_blocks:   # too many stale entries
                self._free_heap = [b for b in range(self.num_blocks) if self.ref_counts[b] == 0]

    def _take(self, block_id: int) -> None:
        self.ref_counts[block_id] = 1
        self._num_free -= 1

    def _reused(self, block_id: int) -> None:
        if self.on_reuse is not None:
            self.on_reuse(block_id)


