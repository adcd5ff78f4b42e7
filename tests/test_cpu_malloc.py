"""`keep_freed_memory`: freed tensor memory is reused instead of mapped again;
`release_freed_memory`: and handed back to the system when an engine is built.

Each check runs in a fresh Python process, since the setting is process-wide and
glibc's thresholds adapt to what a process has already allocated."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from minillm.config import EngineConfig
from minillm.model.executor import EagerExecutor
from minillm.model.llama import LlamaModel
from minillm.model.tiny import build_tiny_llama
from minillm_cpu import executor
from minillm_cpu import kernels as cpu_kernels
from minillm_cpu import malloc as cpu_malloc

pytestmark = pytest.mark.unit

needs_glibc = pytest.mark.skipif(cpu_malloc._glibc() is None, reason="glibc's mallopt only")

# Three 20 MiB tensors, filled, then freed: 10 rounds to warm up, then 30 rounds whose
# minor page faults are printed. Both modes first pin glibc's mmap threshold at its start
# value (128 KiB), which also stops glibc from raising it on its own (unpinned, it
# sometimes adapts after a few rounds and sometimes does not: no fixed baseline); "keep"
# then applies the setting over it.
ALLOCATE_AND_FREE = textwrap.dedent("""
    import ctypes, resource, sys, torch
    import minillm  # an engine's process, as the executor sees it (the import sets up torch)
    from minillm_cpu.malloc import M_MMAP_THRESHOLD, keep_freed_memory
    assert ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 << 10)
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    def one_round():
        blocks = [torch.ones(5 << 20) for _ in range(3)]
        del blocks
    for _ in range(10):
        one_round()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(30):
        one_round()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")
PAGES_PER_ROUND = 3 * (20 << 20) // 4096


def page_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", ALLOCATE_AND_FREE, mode], capture_output=True,
                         text=True, timeout=120, check=True)
    return int(out.stdout.strip())


@needs_glibc
def test_freed_blocks_are_reused_not_mapped_again():
    """With the setting, warmed-up rounds map no new pages (measured: none in 30 rounds);
    with glibc's start threshold every round maps all its pages afresh, which shows the
    count sees the difference."""
    assert page_faults("keep") < PAGES_PER_ROUND
    assert page_faults("start") > 25 * PAGES_PER_ROUND


def test_without_glibc_it_does_nothing(monkeypatch):
    monkeypatch.setattr(cpu_malloc, "_glibc", lambda: None)
    cpu_malloc.keep_freed_memory.cache_clear()
    try:
        assert cpu_malloc.keep_freed_memory() is False
    finally:
        cpu_malloc.keep_freed_memory.cache_clear()


def test_the_cpu_executor_sets_it_and_releases_before_it_swaps(monkeypatch):
    if cpu_kernels.unavailable_reason():
        pytest.skip("the C++ kernels do not build here")
    calls = []
    monkeypatch.setattr(executor, "keep_freed_memory", lambda: calls.append("keep"))
    monkeypatch.setattr(executor, "release_freed_memory", lambda: calls.append("release"))
    swap = executor.swap_modules
    monkeypatch.setattr(executor, "swap_modules",
                        lambda *args, **kwargs: calls.append("swap") or swap(*args, **kwargs))
    config = EngineConfig(num_kv_blocks=8, max_num_seqs=2)
    executor.CpuExecutor().load(LlamaModel.from_hf(build_tiny_llama(seed=0)), config)
    assert calls == ["keep", "release", "swap"]
    calls.clear()
    EagerExecutor().load(LlamaModel.from_hf(build_tiny_llama(seed=0)), config)
    assert calls == []                           # the readable engine leaves malloc alone


def test_release_is_malloc_trim_of_zero(monkeypatch):
    """What it gives back depends on how the heap lies (measured on engines and lessons
    in docs/performance.md); what it must do is call glibc's malloc_trim(0)."""
    trims = []

    class FakeGlibc:
        def malloc_trim(self, pad):
            trims.append(pad)
            return 1

    monkeypatch.setattr(cpu_malloc, "_glibc", FakeGlibc)
    assert cpu_malloc.release_freed_memory() is True
    assert trims == [0]
    monkeypatch.setattr(cpu_malloc, "_glibc", lambda: None)
    assert cpu_malloc.release_freed_memory() is False
