"""glibc's allocator, tuned for engine steps: keep freed memory for the next step's tensors.

Every step allocates and frees the same kinds of temporaries — activations
`[T, 3072]`, logits `[S, vocab]`, oneDNN's scratch space — from a few hundred KB to a
few MB each. glibc's `malloc` hands blocks above its *mmap threshold* straight to the
kernel and back on `free`, and it returns the top of its heap once more than the *trim
threshold* of it is free. Both start small and only grow as the process goes, so the
next step's tensors keep landing on pages the kernel must map and zero again, one
*minor page fault* (缺页) per 4 KiB. The settings below cut those faults by about an
order of magnitude on the peers workload (`docs/performance.md`, change 7).

`keep_freed_memory()` fixes both thresholds once, with glibc's `mallopt`: blocks up to
32 MiB come from the heap, and up to 64 MiB of freed heap stays mapped for reuse.
Larger tensors (the 113 MB vocabulary matrix, say) are still mapped on their own.
vLLM's CPU build gets the same effect another way: it preloads tcmalloc into its worker
(`vllm/platforms/cpu.py`).

The price: glibc trims only the *top* of its heap, so when a whole engine is freed (its
weights and packed copies are hundreds of heap blocks of a few MB), the free space in the
middle of the heap stays mapped — most of a SmolLM2 engine in fp32. A notebook that
builds engine after engine would keep every old one's memory. `release_freed_memory()`
(glibc's `malloc_trim(0)`) hands those free pages back; the "cpu" executor calls it when
it loads a model (never during a step), so `llm = LLM(...)` run again holds at most the
old engine and the new one, not every engine built so far.

Elsewhere than glibc (macOS, musl) both do nothing.
"""

from __future__ import annotations

import ctypes
from functools import cache

M_TRIM_THRESHOLD = -1           # glibc's <malloc.h> parameter numbers
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20     # the largest glibc accepts on 64-bit Linux
TRIM_THRESHOLD_BYTES = 64 << 20


def _glibc():
    """The C library this process runs on, if it is glibc (it has `mallopt` and
    `gnu_get_libc_version`), else None."""
    try:
        libc = ctypes.CDLL(None)            # the symbols already loaded, libc's among them
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None


@cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (once per process); True if both were taken."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def release_freed_memory() -> bool:
    """Give the heap's free pages back to the system (glibc's `malloc_trim(0)`, which
    also releases free space in the middle of the heap); True if any was released.
    Costs a walk over the heap (milliseconds): call it between runs, not in a step."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(0))
