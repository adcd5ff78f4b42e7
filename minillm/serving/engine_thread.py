"""The one thread on which the server runs PyTorch: load, warm-up and every step.

Why one thread, and why it matters on a CPU. PyTorch's CPU kernels split their work
over an OpenMP team (GNU OpenMP, libgomp, in the pip wheels). Two facts about libgomp
decide how fast a server's steps run:

1. **Each thread that starts parallel work gets its own team** of worker threads. A
   model loaded on the main thread and stepped on a worker thread has two teams, one of
   them idle.
2. **Workers wait for the next parallel region by spinning, but only while the process
   has no more OpenMP threads than CPUs.** After each region a worker polls for the next
   one (`GOMP_SPINCOUNT`, 300,000 polls by default) before it sleeps in the kernel. If
   the threads libgomp manages outnumber the CPUs, it cuts the polling to 1,000 (see
   `do_spin` in libgomp's `config/linux/wait.h`): workers then fall asleep between the
   hundreds of small regions of one forward pass and must be woken for each.

So a second team, even an idle one, slows every step: with the model loaded on the main
thread and steps on a worker (3 managed threads on 2 CPUs), the server's decode steps
were as slow as with `OMP_WAIT_POLICY=PASSIVE` (docs/performance.md, "Online serving").
Running everything that touches tensors on this one thread leaves one team, as offline.

The event loop thread still calls the engine between steps (`add_request`, `abort`):
those are Python bookkeeping (queues, block lists) that start no parallel region.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor


class EngineThread:
    """A single worker thread; `call` from plain code, `await run(...)` from coroutines."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minillm-engine")

    def call(self, fn, *args):
        """Run `fn(*args)` on the engine thread and wait for it (before the event loop runs)."""
        return self._pool.submit(fn, *args).result()

    async def run(self, fn, *args):
        """Run `fn(*args)` on the engine thread without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        """No more work; a call still running finishes on its own."""
        self._pool.shutdown(wait=False)
