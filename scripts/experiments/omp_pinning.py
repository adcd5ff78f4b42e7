"""Issue 18: does pinning each OpenMP thread to its own core (as vLLM's CPU worker does,
`VLLM_CPU_OMP_THREADS_BIND`) speed up minillm?
    .venv/bin/python scripts/experiments/omp_pinning.py [float32|bfloat16] [rounds]

One `LLM` (continuous batching) runs the bench's peers workload (64 chat prompts, 16 at
a time, EOS ignored) in alternating rounds, "free" (every thread may run on every core,
the default) and "pinned" (the threads that work during a parallel matmul —
the main thread and torch's OpenMP workers — one per core, by `os.sched_setaffinity` on
their thread ids from /proc/self/task). Prints tokens/s per round, the per-round ratio,
and the load average."""
import os
import sys
import time

import torch

from minillm import LLM, SamplingParams
from benchmarks import ab
from benchmarks.peers import peer_output_lengths, peer_prompts


def thread_cpu_ticks() -> dict[int, int]:
    """{thread id: user + system clock ticks so far} for every thread of this process."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks[int(tid)] = int(fields[11]) + int(fields[12])       # utime, stime
    return ticks


def openmp_threads() -> list[int]:
    """The thread ids that work during a parallel matmul (main thread first)."""
    a = torch.randn(1024, 1024)
    before, start = thread_cpu_ticks(), time.perf_counter()
    while time.perf_counter() - start < 1.0:
        a @ a
    after = thread_cpu_ticks()
    busy = [t for t in after if after[t] - before.get(t, 0) > 10]
    return sorted(busy, key=lambda t: (t != os.getpid(), t))


def set_affinity(tids: list[int], pinned: bool) -> None:
    every_core = set(range(os.cpu_count()))
    for i, tid in enumerate(tids):
        os.sched_setaffinity(tid, {i % os.cpu_count()} if pinned else every_core)


def main(dtype: str, rounds: int) -> None:
    torch.set_num_threads(2)
    llm = LLM(max_num_seqs=16, dtype=dtype)
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(llm.tokenizer)]
    lens = peer_output_lengths()
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lens]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    tids = openmp_threads()
    print(f"threads of this process: {len(os.listdir('/proc/self/task'))}, working in a "
          f"matmul: {tids}", flush=True)

    def run(pinned: bool) -> dict:
        set_affinity(tids, pinned)
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        tps = sum(lens) / (time.perf_counter() - start)
        print(f"  {'pinned' if pinned else 'free  '}: {tps:.1f} tokens/s, load {os.getloadavg()[0]:.2f}",
              flush=True)
        return {"tokens_per_s": tps}
    runs = ab.alternate({"free": lambda: run(False), "pinned": lambda: run(True)}, rounds)
    set_affinity(tids, False)
    r = ab.summary(ab.paired_ratios(runs, "pinned", "free", "tokens_per_s"))
    print(f"{dtype}: pinned / free per round {[round(v, 3) for v in r['values']]}, median "
          f"{r['median']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32", int(sys.argv[2]) if len(sys.argv) > 2 else 4)
